"""Triton kernels and their launchers. Launchers assume validated inputs (see ``seam.ops``)."""
