"""Checkpoints: atomic on disk, checked leaf by leaf when restored.

A checkpoint holds named *items*, each a pytree of arrays (for a training
run, see `roxie.run`: the agent state in `agent`, the rest of the loop state
with the runner's key and the host physics in `loop`, the replay buffer in
`replay`), plus a `meta.json`. The arrays are written with orbax
(`orbax.checkpoint`, one PyTree checkpoint per item); `meta.json` is roxie's
own manifest: the step, free-form metadata from the caller, and for every
leaf of every item its path, dtype, shape and CRC-32.

Layout of a run directory's checkpoints:

  RUN/checkpoints/
    step_000000004000/        a committed checkpoint (env step 4000)
      meta.json               manifest + caller metadata, written last
      agent/                  orbax PyTree checkpoint of item 'agent'
      loop/                   ... of item 'loop'
      replay/                 ... of item 'replay' (if saved)
      file.metrics.csv        a caller's file stored with it (`files`)
    step_000000008000/
    .tmp-step_000000012000-<pid>-<n>/   a write in progress (or killed)
    .trash-step_000000000000-<pid>-<n>/ an old checkpoint being deleted

Atomicity. A checkpoint is written into a `.tmp-*` directory and becomes
visible by ONE `os.rename` to its `step_*` name: that rename is the commit
point, so a `step_*` directory is always complete. Orbax has its own atomic
step on local disks (it writes `<item>.orbax-checkpoint-tmp-<time>` and
renames it to `<item>` after writing `commit_success.txt`; a SIGKILL
mid-write leaves `<item>.orbax-checkpoint-tmp*` with part of the data, which
we checked), but that covers one item only; a process killed between two
items, or before `meta.json`, would leave a half checkpoint if the items
were written in place. Killed
writes leave only `.tmp-*` directories, which readers ignore and `cleanup`
removes. Before the commit every file is fsync'ed, and the parent directory
after it, so a committed checkpoint also survives a power cut on filesystems
that honour fsync. Old checkpoints are deleted by first renaming them to
`.trash-*` (atomic), so a kill while deleting never leaves a partial
`step_*` directory either.

Checks on restore. `restore` compares the manifest with the caller's
template (paths, dtypes, shapes) before reading any array, and names every
difference; it then checks each restored array against its CRC-32, so a
truncated or corrupted file is reported as such instead of restoring
garbage. All problems raise `CheckpointError` (a `ValueError`).

Test hook: with the environment variable `ROXIE_CHECKPOINT_PAUSE=<seconds>`,
`save` sleeps that long after writing its first item, inside the write, so a
test can kill the process mid-checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np

CHECKPOINT_DIR = 'checkpoints'
META_FILE = 'meta.json'
FORMAT_VERSION = 1
_STEP_RE = re.compile(r'^step_(\d{12})$')
_PAUSE_ENV = 'ROXIE_CHECKPOINT_PAUSE'
_FILES_DIR = 'file.'  # Prefix of the caller's files (see `save`).
_counter = 0


class CheckpointError(ValueError):
  """A checkpoint that is missing, unreadable, corrupt or does not fit."""


# --- paths -----------------------------------------------------------------


def checkpoint_dir(run_dir: str) -> str:
  """The folder holding a run's checkpoints."""
  return os.path.join(run_dir, CHECKPOINT_DIR)


def step_name(step: int) -> str:
  return f'step_{int(step):012d}'


def list_steps(run_dir: str) -> List[int]:
  """Steps of the committed checkpoints of a run, ascending."""
  root = checkpoint_dir(run_dir)
  if not os.path.isdir(root):
    return []
  steps = []
  for name in os.listdir(root):
    m = _STEP_RE.match(name)
    if m and os.path.isdir(os.path.join(root, name)):
      steps.append(int(m.group(1)))
  return sorted(steps)


def latest(run_dir: str) -> Optional[str]:
  """Path of the newest committed checkpoint of a run, or None."""
  steps = list_steps(run_dir)
  if not steps:
    return None
  return os.path.join(checkpoint_dir(run_dir), step_name(steps[-1]))


def cleanup(run_dir: str) -> List[str]:
  """Removes what interrupted writes and deletions left; returns their names.

  Only call it when no other process writes checkpoints to this run.
  """
  root = checkpoint_dir(run_dir)
  if not os.path.isdir(root):
    return []
  removed = []
  for name in sorted(os.listdir(root)):
    if name.startswith(('.tmp-', '.trash-')):
      shutil.rmtree(os.path.join(root, name), ignore_errors=True)
      removed.append(name)
  return removed


# --- leaves and manifests ----------------------------------------------------


def _entry_name(entry) -> str:
  for attr in ('name', 'key', 'idx'):
    if hasattr(entry, attr):
      return str(getattr(entry, attr))
  return str(entry)


def _is_key_array(x) -> bool:
  dtype = getattr(x, 'dtype', None)
  return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _flatten(tree) -> Tuple[List[Tuple[str, Tuple[str, ...], Any]], Any]:
  """[(keystr path, name parts, leaf)], treedef."""
  with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
  out = []
  for path, leaf in with_path:
    out.append((jax.tree_util.keystr(path) or '<root>',
                tuple(_entry_name(e) for e in path) or ('<root>',), leaf))
  return out, treedef


def _leaf_spec(leaf) -> Tuple[str, Tuple[int, ...]]:
  """(dtype name, shape) as saved: typed PRNG keys are saved as key data."""
  if _is_key_array(leaf):
    data_shape = jax.eval_shape(jax.random.key_data, leaf).shape
    return str(leaf.dtype), tuple(data_shape)  # e.g. 'key<fry>'
  return np.dtype(leaf.dtype).name, tuple(int(d) for d in leaf.shape)


def _key_impl(leaf) -> str:
  """The PRNG implementation's name of a key array or its ShapeDtypeStruct."""
  try:
    return str(jax.random.key_impl(leaf))
  except TypeError:
    return leaf.dtype._impl.name  # pylint: disable=protected-access


def _describe(spec: Tuple[str, Sequence[int]]) -> str:
  dtype, shape = spec
  return f'{dtype}[{",".join(str(d) for d in shape)}]'


def _crc(a: np.ndarray) -> int:
  return zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1)
                    if a.size else b'')


# --- save ----------------------------------------------------------------------


def _fsync_tree(path: str) -> None:
  """fsync every file and directory under path (best effort)."""
  for root, _, files in os.walk(path):
    for name in files:
      try:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
      except OSError:
        continue
      try:
        os.fsync(fd)
      finally:
        os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: str) -> None:
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _orbax():
  # Imported on first use: it takes ~2 s and is not needed for training
  # without checkpoints or for `--help`.
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return ocp


def _write_item(path: str, tree) -> List[Dict[str, Any]]:
  """Writes one item's arrays with orbax; returns its manifest."""
  leaves, _ = _flatten(tree)
  manifest, nested, joined = [], {}, set()
  for keystr, parts, leaf in leaves:
    dtype, shape = _leaf_spec(leaf)
    value = jax.random.key_data(leaf) if _is_key_array(leaf) else leaf
    value = np.asarray(jax.device_get(value))
    entry = {'path': keystr, 'name': list(parts), 'dtype': dtype,
             'shape': list(shape), 'crc32': _crc(value)}
    manifest.append(entry)
    if value.size == 0:  # orbax cannot store empty arrays; the manifest can.
      continue
    dotted = '.'.join(parts)
    if dotted in joined:
      raise CheckpointError(f'Two leaves map to the same name {dotted!r}.')
    joined.add(dotted)
    node = nested
    for p in parts[:-1]:
      node = node.setdefault(p, {})
    node[parts[-1]] = value
  if nested:
    ocp = _orbax()
    options = _this_process_only(ocp)
    with _quiet_orbax():
      ckptr = ocp.Checkpointer(
          ocp.StandardCheckpointHandler(multiprocessing_options=options),
          multiprocessing_options=options)
      try:
        ckptr.save(os.path.abspath(path), args=ocp.args.StandardSave(nested))
      except OSError:
        raise
      except Exception as e:  # orbax/tensorstore: a ValueError with errno.
        raise _write_error(path, e) from None
      finally:
        ckptr.close()
  return manifest


class CheckpointWriteError(OSError):
  """A checkpoint could not be written (e.g. the disk is full).

  The write is abandoned (its temporary directory removed); committed
  checkpoints are untouched.
  """


def _write_error(path: str, e: Exception) -> CheckpointWriteError:
  """An OSError for orbax's failure to write `path` (errno kept if known)."""
  text = str(e)
  m = re.search(r"os_error_code='?(\d+)", text)
  if m:
    errno_ = int(m.group(1))
    return CheckpointWriteError(errno_, os.strerror(errno_), path)
  return CheckpointWriteError(f'writing {path} failed: '
                              f'{type(e).__name__}: {text.splitlines()[0][:300]}')


class _quiet_orbax:  # pylint: disable=invalid-name
  """Silences orbax's log records while roxie reports its errors itself.

  A failed orbax write logs the same error from several of its threads
  (absl ERROR lines) before raising it; roxie raises one clear error
  instead. Warnings and above still pass when nothing fails.
  """

  def __enter__(self):
    import logging  # pylint: disable=g-import-not-at-top
    self._logger = logging.getLogger('absl')
    self._level = self._logger.level
    self._logger.setLevel(logging.CRITICAL)
    return self

  def __exit__(self, *exc):
    self._logger.setLevel(self._level)
    return False


def _this_process_only(ocp):
  """Orbax options for a write or read by this process alone.

  The arrays are host copies (NumPy), so no other process takes part; in a
  multi-process JAX job orbax would otherwise wait for all processes at
  its barriers (roxie's multi-process runs checkpoint from process 0 only).
  """
  if jax.process_count() == 1:
    return ocp.options.MultiprocessingOptions()
  me = jax.process_index()
  return ocp.options.MultiprocessingOptions(primary_host=me,
                                            active_processes={me})


def _dump_meta(doc: Mapping[str, Any]) -> str:
  """meta.json text: indented, one line per manifest entry."""
  head = {k: v for k, v in doc.items() if k != 'items'}
  text = json.dumps(head, indent=1)[:-2] + ',\n "items": {'
  parts = []
  for item, manifest in doc['items'].items():
    lines = ',\n'.join('   ' + json.dumps(e) for e in manifest)
    parts.append(f'\n  {json.dumps(item)}: [\n{lines}\n  ]')
  return text + ','.join(parts) + '\n }\n}\n'


def save(run_dir: str, step: int, items: Mapping[str, Any], *,
         meta: Optional[Mapping[str, Any]] = None,
         keep: Optional[int] = None,
         files: Optional[Mapping[str, str]] = None) -> str:
  """Writes a checkpoint of `items` for `step`, atomically.

  Args:
    run_dir: the run directory (checkpoints go to `run_dir/checkpoints`).
    step: the step to file it under (a later save of the same step replaces
      it).
    items: name -> pytree of arrays (jax or numpy); None values are skipped.
    meta: JSON-serialisable metadata stored in `meta.json` under 'meta'.
    keep: keep only the newest `keep` committed checkpoints (None: all).
    files: name -> text of small files stored beside the items (e.g. a copy
      of the run's metrics.csv); `read_file` reads them back.

  Returns:
    The committed checkpoint's path.
  """
  global _counter
  root = checkpoint_dir(run_dir)
  os.makedirs(root, exist_ok=True)
  _counter += 1
  name = step_name(step)
  tmp = os.path.join(root, f'.tmp-{name}-{os.getpid()}-{_counter}')
  os.makedirs(tmp)
  try:
    manifests = {}
    pause = float(os.environ.get(_PAUSE_ENV, '0') or 0)
    for i, (item, tree) in enumerate(items.items()):
      if tree is None:
        continue
      if not re.match(r'^[A-Za-z0-9_]+$', item):
        raise ValueError(f'Bad item name {item!r}.')
      manifests[item] = _write_item(os.path.join(tmp, item), tree)
      if i == 0 and pause > 0:
        time.sleep(pause)
    for fname, text in (files or {}).items():
      if not re.match(r'^[A-Za-z0-9_.]+$', fname) or fname == META_FILE:
        raise ValueError(f'Bad file name {fname!r}.')
      with open(os.path.join(tmp, _FILES_DIR + fname), 'w', newline='') as f:
        f.write(text)
    doc = {'format': FORMAT_VERSION, 'step': int(step), 'time': time.time(),
           'meta': dict(meta or {}), 'items': manifests}
    with open(os.path.join(tmp, META_FILE), 'w') as f:
      f.write(_dump_meta(doc))
    _fsync_tree(tmp)
    final = os.path.join(root, name)
    if os.path.exists(final):  # Same step again: move the old one aside.
      _counter += 1
      os.rename(final, os.path.join(root, f'.trash-{name}-{os.getpid()}-'
                                          f'{_counter}'))
    os.rename(tmp, final)  # The commit point.
    _fsync_dir(root)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  if keep is not None:
    prune(run_dir, keep)
  cleanup_trash(run_dir)
  return final


def read_file(path: str, name: str) -> Optional[str]:
  """The text of a file `save` stored in the checkpoint at `path`, or None."""
  try:
    with open(os.path.join(path, _FILES_DIR + name), newline='') as f:
      return f.read()
  except (OSError, UnicodeDecodeError):
    return None


def prune(run_dir: str, keep: int) -> None:
  """Deletes all but the newest `keep` committed checkpoints (keep >= 1)."""
  global _counter
  keep = max(1, int(keep))
  root = checkpoint_dir(run_dir)
  for step in list_steps(run_dir)[:-keep]:
    _counter += 1
    trash = os.path.join(root, f'.trash-{step_name(step)}-{os.getpid()}-'
                               f'{_counter}')
    os.rename(os.path.join(root, step_name(step)), trash)
  cleanup_trash(run_dir)


def cleanup_trash(run_dir: str) -> None:
  root = checkpoint_dir(run_dir)
  if os.path.isdir(root):
    for name in os.listdir(root):
      if name.startswith('.trash-'):
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# --- restore ---------------------------------------------------------------------


def read_meta(path: str) -> Dict[str, Any]:
  """The parsed `meta.json` of the checkpoint at `path` (checked)."""
  if not os.path.isdir(path):
    raise CheckpointError(f'No checkpoint at {path}.')
  meta_path = os.path.join(path, META_FILE)
  if not os.path.exists(meta_path):
    raise CheckpointError(f'Checkpoint {path} is incomplete: it has no '
                          f'{META_FILE}.')
  try:
    with open(meta_path) as f:
      doc = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise CheckpointError(f'Checkpoint {path} is unreadable: {META_FILE} is '
                          f'truncated or corrupt ({e}).') from e
  if not isinstance(doc, dict) or 'items' not in doc or 'step' not in doc:
    raise CheckpointError(f'Checkpoint {path} is unreadable: {META_FILE} is '
                          'not a roxie checkpoint manifest.')
  if doc.get('format') != FORMAT_VERSION:
    raise CheckpointError(
        f'Checkpoint {path} has format {doc.get("format")!r}; this roxie '
        f'reads format {FORMAT_VERSION}.')
  try:
    for manifest in doc['items'].values():
      for e in manifest:
        if not (isinstance(e['path'], str) and isinstance(e['name'], list)
                and isinstance(e['dtype'], str)
                and all(isinstance(d, int) for d in e['shape'])):
          raise TypeError(e)
  except (AttributeError, KeyError, TypeError) as e:
    raise CheckpointError(f'Checkpoint {path} is corrupt: {META_FILE} has a '
                          f'malformed array list ({e!r:.100}).') from None
  return doc


def template_manifest(template) -> List[Tuple[str, Tuple[str, ...],
                                              Tuple[str, Tuple[int, ...]]]]:
  """[(path, name parts, (dtype, shape))] of a template's leaves."""
  leaves, _ = _flatten(template)
  return [(k, parts, _leaf_spec(leaf)) for k, parts, leaf in leaves]


def compare(saved: Sequence[Mapping[str, Any]], template,
            max_listed: int = 6) -> List[str]:
  """Human-readable differences between a saved manifest and a template."""
  want = {k: spec for k, _, spec in template_manifest(template)}
  have = {e['path']: (e['dtype'], tuple(e['shape'])) for e in saved}
  problems = []
  for k, spec in want.items():
    if k not in have:
      problems.append(f'{k} ({_describe(spec)}) is missing from the checkpoint')
    elif have[k] != spec:
      problems.append(f'{k} is {_describe(have[k])} in the checkpoint, '
                      f'{_describe(spec)} here')
  for k, spec in have.items():
    if k not in want:
      problems.append(f'{k} ({_describe(spec)}) is in the checkpoint but not '
                      'here')
  if len(problems) > max_listed:
    problems = problems[:max_listed] + [
        f'... and {len(problems) - max_listed} more of {len(want)} arrays']
  return problems


def _read_item(path: str, manifest: Sequence[Mapping[str, Any]]):
  """{path: np.ndarray} of one item, checked against its manifest."""
  need_orbax = any(int(np.prod(e['shape'])) > 0 for e in manifest)
  nested = {}
  if need_orbax:
    if not os.path.isdir(path):
      raise CheckpointError(
          f'Checkpoint {os.path.dirname(path)} is incomplete: '
          f'{os.path.basename(path)}/ is missing.')
    ocp = _orbax()
    with _quiet_orbax():
      ckptr = ocp.Checkpointer(ocp.StandardCheckpointHandler())
      try:
        nested = ckptr.restore(os.path.abspath(path))
      except Exception as e:  # orbax/tensorstore errors on damaged files.
        raise CheckpointError(
            f'Checkpoint item {path} is unreadable (truncated or corrupt?): '
            f'{type(e).__name__}: {str(e)[:300]}') from None
      finally:
        ckptr.close()
  out = {}
  for e in manifest:
    dtype, shape = e['dtype'], tuple(e['shape'])
    store_dtype = np.uint32 if dtype.startswith('key<') else np.dtype(dtype)
    if int(np.prod(shape)) == 0:
      value = np.zeros(shape, store_dtype)
    else:
      node = nested
      try:
        for p in e['name']:
          node = node[p]
      except (KeyError, TypeError, IndexError):
        raise CheckpointError(
            f'Checkpoint item {path} is corrupt: array {e["path"]} is listed '
            f'in {META_FILE} but not stored.') from None
      value = np.asarray(node)
    if value.shape != shape or (not dtype.startswith('key<')
                                and value.dtype != store_dtype):
      raise CheckpointError(
          f'Checkpoint item {path} is corrupt: {e["path"]} is stored as '
          f'{value.dtype}{list(value.shape)} but listed as '
          f'{dtype}{list(shape)}.')
    if 'crc32' in e and _crc(value) != e['crc32']:
      raise CheckpointError(
          f'Checkpoint item {path} is corrupt: {e["path"]} fails its CRC-32 '
          'check.')
    out[e['path']] = value
  return out


def read(path: str) -> Dict[str, Dict[str, np.ndarray]]:
  """Every item of a checkpoint as {leaf path: array}, without a template.

  For inspection and comparisons (typed PRNG keys come back as key data).
  """
  doc = read_meta(path)
  return {item: _read_item(os.path.join(path, item), manifest)
          for item, manifest in doc['items'].items()}


def restore(path: str, templates: Mapping[str, Any], *,
            optional: Iterable[str] = ()) -> Tuple[Dict[str, Any],
                                                   Dict[str, Any]]:
  """Reads the checkpoint at `path` into the templates' structures.

  Args:
    path: a committed checkpoint directory (see `latest`).
    templates: item name -> pytree whose leaves give the expected shapes and
      dtypes (arrays or `jax.ShapeDtypeStruct`, e.g. from `jax.eval_shape`).
    optional: items that may be absent; they come back as None.

  Returns:
    (items, meta): item name -> pytree of numpy arrays (typed PRNG keys come
    back as key arrays) in the template's structure; and the `meta.json`
    document.

  Raises:
    CheckpointError: missing, unreadable, corrupt, or not fitting the
      templates (the message names the arrays that differ).
  """
  doc = read_meta(path)
  optional = set(optional)
  saved_items = doc['items']
  problems = []
  for item, template in templates.items():
    if item not in saved_items:
      if item not in optional:
        problems.append(f'item {item!r} is missing from the checkpoint')
      continue
    diffs = compare(saved_items[item], template)
    if diffs:
      problems.append(f'in item {item!r}:\n    ' + '\n    '.join(diffs))
  if problems:
    raise CheckpointError(
        f'Checkpoint {path} does not fit (another agent, task or network '
        'size?): ' + '\n  '.join(problems))
  out = {}
  for item, template in templates.items():
    if item not in saved_items:
      out[item] = None
      continue
    arrays = _read_item(os.path.join(path, item), saved_items[item])
    leaves, treedef = _flatten(template)
    values = []
    for keystr, _, leaf in leaves:
      value = arrays[keystr]
      if _is_key_array(leaf):
        value = jax.random.wrap_key_data(value, impl=_key_impl(leaf))
      values.append(value)
    out[item] = jax.tree_util.tree_unflatten(treedef, values)
  return out, doc
