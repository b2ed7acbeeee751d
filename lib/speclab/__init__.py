"""speclab: will speculative decoding pay off on your server? Measure, predict, decide."""

from speclab.errors import SpeclabError
from speclab.urls import Endpoint

__version__ = "0.1.0"
__all__ = ["Endpoint", "SpeclabError", "__version__"]
