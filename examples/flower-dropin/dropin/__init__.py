"""dropin: a Flower / PyTorch app with Re-Shuffle as a drop-in."""
