"""Example user workloads (`trainer.examples.linear:build`)."""
