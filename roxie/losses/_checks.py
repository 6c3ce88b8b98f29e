"""Input checks for the loss functions that name the offending argument.

`chex.assert_rank([a, b, c], ...)` reports "input 2 has rank 1": the reader
must count arguments to learn which one is wrong. These helpers take the
arguments by name and say which function, which argument, what was expected
and what was given. The most common mistake is passing a batch to a function
written for one example, so a rank exactly one too high also suggests
`jax.vmap`.

They only read static shapes and dtypes, so under `jax.jit` they run once, at
trace time, and cost nothing in the compiled computation.
"""

from typing import AbstractSet, Any, Union

import jax.numpy as jnp
import numpy as np

Rank = Union[int, AbstractSet[int]]


class LossInputError(AssertionError, ValueError):
  """A loss function got an argument of the wrong rank, dtype or shape.

  A `ValueError` (the argument has the wrong value for the function) that is
  also an `AssertionError`, the type `chex` raises for the same checks, so
  code written against either keeps catching it.
  """


def _shape(x: Any) -> tuple[int, ...]:
  return tuple(jnp.shape(x))


def _dtype(x: Any) -> np.dtype:
  # Python scalars have no `.dtype`; NumPy gives them their natural kind.
  return x.dtype if hasattr(x, 'dtype') else np.result_type(x)


def _describe(rank: Rank) -> str:
  if isinstance(rank, int):
    return str(rank)
  return ' or '.join(str(r) for r in sorted(rank))


def check_rank(fn: str, rank: Rank, **arrays: Any) -> None:
  """Checks that every named argument has the given rank.

  Args:
    fn: name of the public function being checked, for the message.
    rank: the expected rank, or a set of allowed ranks.
    **arrays: the arguments, by their names in `fn`'s signature.

  Raises:
    LossInputError: naming the first argument whose rank is not allowed.
  """
  allowed = {rank} if isinstance(rank, int) else set(rank)
  for name, x in arrays.items():
    shape = _shape(x)
    if len(shape) in allowed:
      continue
    message = (f'{fn}: argument `{name}` must have rank {_describe(rank)}, '
               f'got rank {len(shape)} (shape {shape}).')
    if len(shape) - 1 in allowed:
      message += (
          f' {fn} takes ONE unbatched example; for a batch, map it over the '
          f'leading axis with jax.vmap, e.g. jax.vmap({fn})(...).')
    raise LossInputError(message)


def check_dtype(fn: str, kind: type, **arrays: Any) -> None:
  """Checks that every named argument has a dtype of the given kind.

  Args:
    fn: name of the public function being checked, for the message.
    kind: `float` (any floating dtype), `int` (any integer dtype) or `bool`.
    **arrays: the arguments, by their names in `fn`'s signature.

  Raises:
    LossInputError: naming the first argument of another dtype.
  """
  abstract = {float: jnp.floating, int: jnp.integer, bool: jnp.bool_}[kind]
  for name, x in arrays.items():
    dtype = _dtype(x)
    if not jnp.issubdtype(dtype, abstract):
      raise LossInputError(
          f'{fn}: argument `{name}` must have a {kind.__name__} dtype, got '
          f'dtype {dtype} (shape {_shape(x)}).')


def check_same_shape(fn: str, **arrays: Any) -> None:
  """Checks that all named arguments have one shape.

  Args:
    fn: name of the public function being checked, for the message.
    **arrays: the arguments (or slices of them, under a descriptive name such
      as 'actions[:, 0]' passed with `**{...}`).

  Raises:
    LossInputError: listing every argument's shape when they differ.
  """
  shapes = {name: _shape(x) for name, x in arrays.items()}
  if len(set(shapes.values())) > 1:
    listed = ', '.join(f'`{name}` {shape}' for name, shape in shapes.items())
    raise LossInputError(
        f'{fn}: arguments {", ".join(f"`{n}`" for n in shapes)} must have '
        f'the same shape, got {listed}.')
