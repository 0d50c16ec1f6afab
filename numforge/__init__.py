"""numforge: a GPT engine from first principles.

Every forward and backward pass is derived by hand and written with array
operations; ``numforge.backend`` runs the same code on NumPy or CuPy.
"""

from .backend import array_module, backend_name, get_xp, set_backend, to_numpy, use_backend

__version__ = "0.1.0"

__all__ = ["array_module", "backend_name", "get_xp", "set_backend", "to_numpy", "use_backend"]
