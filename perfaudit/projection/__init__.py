"""Projection of a recorded run onto a named GPU (`--target`): the device table, the kernel model and its
calibration (data, with sources), and the simulation of the host and GPU queues that gives a projected step.
Below the facts that read it; reads only the trace model."""
