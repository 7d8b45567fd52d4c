"""Training harness: lr schedule, precision, loop, checkpoints. Imports no Ray."""
