from loadtests.cache_eval.cli import main

main()
