"""Tensors on the wire: dtype + shape + raw little-endian bytes.

Shared by the SDK (numpy in, numpy out), the router (validation) and the node
(batch assembly with torch). Nothing here touches single elements in Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ferryman.v1 import common_pb2

DataType = common_pb2.DataType

# Registry names (the proto enum without its prefix) -> wire enum.
DTYPE_BY_NAME: dict[str, DataType] = {
    name.removeprefix("DATA_TYPE_"): cast(DataType, value)
    for name, value in common_pb2.DataType.items()
    if value != common_pb2.DATA_TYPE_UNSPECIFIED
}
NAME_BY_DTYPE: dict[DataType, str] = {value: name for name, value in DTYPE_BY_NAME.items()}

# numpy has no bfloat16: BF16 travels as raw 2-byte words and is viewed by torch.
NUMPY_BY_DTYPE: dict[DataType, np.dtype[Any]] = {
    common_pb2.DATA_TYPE_BOOL: np.dtype("?"),
    common_pb2.DATA_TYPE_UINT8: np.dtype("u1"),
    common_pb2.DATA_TYPE_INT8: np.dtype("i1"),
    common_pb2.DATA_TYPE_INT16: np.dtype("<i2"),
    common_pb2.DATA_TYPE_INT32: np.dtype("<i4"),
    common_pb2.DATA_TYPE_INT64: np.dtype("<i8"),
    common_pb2.DATA_TYPE_FP16: np.dtype("<f2"),
    common_pb2.DATA_TYPE_FP32: np.dtype("<f4"),
    common_pb2.DATA_TYPE_FP64: np.dtype("<f8"),
}
ITEMSIZE_BY_DTYPE: dict[DataType, int] = {
    **{dtype: np_dtype.itemsize for dtype, np_dtype in NUMPY_BY_DTYPE.items()},
    common_pb2.DATA_TYPE_BF16: 2,
}
DTYPE_BY_NUMPY: dict[np.dtype[Any], DataType] = {
    np_dtype.newbyteorder("<") if np_dtype.itemsize > 1 else np_dtype: dtype
    for dtype, np_dtype in NUMPY_BY_DTYPE.items()
}


class TensorError(ValueError):
    """A tensor whose dtype, shape or byte length is inconsistent."""


ECHO_DIMS = 8
"""Dimensions of a shape an error message repeats (a tenant may send a million)."""


def shape_text(shape: Sequence[int]) -> str:
    """``shape`` as an error shows it: its first ECHO_DIMS dimensions, the rest counted."""
    more = len(shape) - ECHO_DIMS
    dims = ", ".join(str(d) for d in shape[:ECHO_DIMS])
    return f"[{dims}, … {more} more]" if more > 0 else f"[{dims}]"


def expected_nbytes(tensor: common_pb2.Tensor) -> int:
    """Bytes the tensor's dtype and shape call for; raises TensorError if impossible."""
    if tensor.dtype not in ITEMSIZE_BY_DTYPE:
        raise TensorError(f"unsupported dtype {tensor.dtype}")
    if any(d < 0 for d in tensor.shape):
        raise TensorError(f"negative dimension in shape {shape_text(tensor.shape)}")
    return math.prod(tensor.shape) * ITEMSIZE_BY_DTYPE[tensor.dtype]


def check_tensor(tensor: common_pb2.Tensor) -> None:
    """Raise TensorError unless data length matches dtype and shape."""
    want = expected_nbytes(tensor)
    if len(tensor.data) != want:
        raise TensorError(
            f"data has {len(tensor.data)} bytes, shape {shape_text(tensor.shape)} of "
            f"{NAME_BY_DTYPE.get(tensor.dtype, tensor.dtype)} needs {want}"
        )


def encode(array: NDArray[Any]) -> common_pb2.Tensor:
    """A numpy array as a wire tensor (little-endian, C order)."""
    arr = np.ascontiguousarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    dtype = DTYPE_BY_NUMPY.get(arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype)
    if dtype is None:
        raise TensorError(f"numpy dtype {arr.dtype} has no wire type")
    return common_pb2.Tensor(dtype=dtype, shape=list(arr.shape), data=arr.tobytes())


def decode(tensor: common_pb2.Tensor) -> NDArray[Any]:
    """A wire tensor as a read-only numpy array (no copy). BF16 comes back as uint16 words."""
    check_tensor(tensor)
    np_dtype = NUMPY_BY_DTYPE.get(tensor.dtype, np.dtype("<u2"))
    return np.frombuffer(tensor.data, dtype=np_dtype).reshape(tuple(tensor.shape))
