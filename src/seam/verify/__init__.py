"""``seam verify``: every fused op against its reference on this machine's device."""
