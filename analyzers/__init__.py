"""Server side: Reconstruct, central mechanisms and baselines, metrics, rendering."""
