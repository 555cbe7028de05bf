"""Number formats: MXFP8 (E4M3 + UE8M0 per 32), NVFP4 (E2M1 + E4M3 per 16), pure PyTorch."""
