"""``seam verify``: every fused op against its reference on this machine's device (``case_*.py``);
``python -m seam.verify.dist`` under torchrun: the Lamport fusions across real GPUs."""
