"""Public ops: docstring, input checks, output allocation, launch, ``torch.library`` registration."""
