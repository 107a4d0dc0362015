"""Ways to look at a switch: its SVD word dimensions, the spans it highlights, the style meter."""
