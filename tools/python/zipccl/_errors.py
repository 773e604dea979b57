"""The package's exceptions, in pure Python: ``except zipccl.FormatError`` loads neither numpy nor the C
API library. zipccl._capi raises them for the C API's status codes (zipccl/zipccl_c.h)."""


class FormatError(ValueError):
    """A malformed, truncated or foreign zipccl frame."""


class LayoutError(ValueError):
    """A hetero layout that breaks a constraint (the C++ library's message)."""


class BatchError(ValueError):
    """A hetero batch that is invalid (negative tokens, a bad replica map, overflow)."""


class LimitError(ValueError):
    """A hetero layout, batch or plan above the library's size limits."""
