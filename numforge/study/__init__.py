"""Tools to study a model: they read the caches the model keeps for its backward, never recompute."""
