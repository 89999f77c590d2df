"""Development tooling: the launcher, the CLI, embedded servers, model builders, code generation
and the profiling runner. No service imports it at runtime."""
