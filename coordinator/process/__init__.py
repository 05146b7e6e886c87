"""The ``groupcoord serve`` process: options, start-up, shutdown, tuning, snapshot pick-up, the sample sink."""
