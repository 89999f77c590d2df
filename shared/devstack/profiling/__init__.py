"""`switchyard profile`: load a running stack with a named scenario, then report where the time goes."""
