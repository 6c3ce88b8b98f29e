"""A training run's checkpoints: what they hold, their identity, save and load.

The format is `roxie.checkpoint`'s; this module decides the items (agent,
loop, replay), the runner's host-side state in meta.json, and checks that
a checkpoint belongs to the run that loads it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from roxie import checkpoint as ckpt_lib
from roxie import config as config_lib
from roxie import distributed
from roxie.run.config import AGENT_ONLY, RUN_SETTINGS, RunConfig, as_run_config
from roxie.run.files import METRICS_FILE, STATE_FILE, load_agent_state, save_agent_state
from roxie.run.health import _count_inexact, _nonfinite_message, nonfinite_leaves
from roxie.run.programs import Programs


@dataclasses.dataclass
class _Runner:
  """The runner's host-side state (saved in each checkpoint's meta.json)."""
  env_steps: int = 0
  next_eval: int = 0
  last_eval: Optional[float] = None
  last_eval_std: Optional[float] = None
  train_return: float = float('nan')
  csv_rows: int = 0
  csv_columns: Optional[List[str]] = None
  wall_time: float = 0.0  # Seconds of training before this process.
  stage: int = 0  # Resolution-schedule stage of the state (0 without one).
  # Since the last metrics row: action dims the env clipped (outside [-1, 1]
  # or NaN) and envs reset after their physics diverged.
  clipped: int = 0
  diverged: int = 0

  def to_json(self) -> Dict[str, Any]:
    d = dataclasses.asdict(self)
    # JSON has no NaN; keep it readable and exact.
    d['train_return'] = repr(self.train_return)
    return d

  @classmethod
  def from_json(cls, d: Mapping[str, Any]) -> '_Runner':
    d = dict(d)
    d['train_return'] = float(d['train_return'])
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)
                  if f.name in d})


def adopt_metrics(csv_log, runner: _Runner, path: str, replay_restored: bool,
                  on_policy: bool, who: str = '') -> List[str]:
  """After restoring the checkpoint at `path`: the run's metrics file.

  `csv_log` (a `roxie.run.logging._MetricsCsv`) keeps the rows the
  checkpoint recorded (later rows are dropped, a damaged file is rewritten
  from the checkpoint's copy). Returns the notes a resume shows, single run
  and population member alike (`who` prefixes them: a member's label);
  warnings start with 'warning:' so that they show even when quiet.
  """
  prefix = f'{who}: ' if who else ''
  dropped = csv_log.adopt(runner.csv_rows, runner.csv_columns,
                          saved=ckpt_lib.read_file(path, METRICS_FILE))
  notes = []
  if dropped > 0:
    notes.append(f'{prefix}dropped {dropped} {METRICS_FILE} row(s) written '
                 'after that checkpoint; they are recomputed.')
  if csv_log.restored:
    notes.append(f'warning: {prefix}{METRICS_FILE} was damaged '
                 f'({csv_log.restored}); restored its {csv_log.rows} '
                 'row(s) from the checkpoint.')
  if not on_policy and not replay_restored:
    notes.append(f'warning: {prefix}{path} has no replay buffer (saved with '
                 '--no-save-replay): continuing with an EMPTY replay, so '
                 'this run is no longer exact with an uninterrupted one.')
  return notes


def _items(progs: Programs, state, runner_key, save_replay: bool,
           host_rows=None):
  """The checkpoint items of a LoopState (host physics read now, or given)."""
  loop_item = {'state': state._replace(agent=(), replay=()),
               'runner_key': runner_key}
  if progs.host_physics:
    loop_item['host_physics'] = (progs.env.get_host_state()
                                 if host_rows is None else host_rows)
  replay = state.replay if (save_replay and not progs.recipe.on_policy) else None
  return {'agent': state.agent, 'loop': loop_item, 'replay': replay}


def _templates(progs: Programs, seed_key):
  """Shapes and dtypes of the checkpoint items (traced, nothing runs)."""
  shapes = jax.eval_shape(progs.init, seed_key)
  loop_item = {'state': shapes._replace(agent=(), replay=()),
               'runner_key': jax.ShapeDtypeStruct(seed_key.shape,
                                                  seed_key.dtype)}
  if progs.host_physics:
    rows = progs.env.get_host_state()
    loop_item['host_physics'] = jax.ShapeDtypeStruct(rows.shape, rows.dtype)
  templates = {'agent': shapes.agent, 'loop': loop_item}
  if not progs.recipe.on_policy:
    templates['replay'] = shapes.replay
  return templates, shapes


def _check_identity(path: str, saved: Optional[Mapping[str, Any]],
                    run: Any) -> None:
  """Names what differs between the run a checkpoint was written for and this.

  Args:
    path: the checkpoint.
    saved: the `RunConfig.identity()` it recorded (JSON; None: none).
    run: this run's RunConfig (or config.json's object).

  Raises:
    roxie.checkpoint.CheckpointError: they differ, naming each difference.
  """
  if not saved:
    return
  run = as_run_config(run)
  here = run.identity()
  diffs = []
  for k in ('agent', 'task', 'backend', 'num_envs', 'seed', 'env_options',
            'resolution_schedule'):
    if saved.get(k) != here.get(k):
      diffs.append(f'{k} {saved.get(k)!r} (this run: {here.get(k)!r})')
  if not diffs and saved.get('config') != here.get('config'):
    a, b = saved.get('config') or {}, here.get('config') or {}
    try:  # A field added since (e.g. encoder_pooling) has its default.
      defaults = config_lib.to_dict(run.agent_module().Config())
    except (KeyError, TypeError, ValueError):
      defaults = {}
    for k in sorted(set(a) | set(b)):
      if k not in a and k in defaults and b.get(k) == defaults[k]:
        continue
      if k in RUN_SETTINGS and k not in b:
        continue  # A Config field once, a run setting now (compared above).
      if a.get(k) != b.get(k):
        diffs.append(f'config {k} {a.get(k)!r} (this run: {b.get(k)!r})')
  if diffs:
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} belongs to another run: it was written for '
        + ', '.join(diffs) + '.')


def _load_checkpoint(path: str, progs: Programs, run: RunConfig, seed_key):
  """(LoopState on device, runner key, _Runner, replay restored?) from path.

  On the native backend the host physics is restored into `progs.env`.
  """
  templates = _templates(progs, seed_key)
  state, key, runner, replay_restored, host_rows = _read_checkpoint(
      path, progs, run, templates)
  state = distributed.put_like(state, templates[1])  # As the program lays it out.
  if progs.host_physics:
    progs.env.set_host_state(host_rows)
  return state, key, runner, replay_restored


def _read_checkpoint(path: str, progs: Programs, run: RunConfig, templates):
  """(LoopState, runner key, _Runner, replay restored?, host rows) from path.

  `templates` is `_templates(progs, seed_key)`. The state's leaves are host
  arrays; the host physics rows (None off the native backend) are returned,
  not restored.
  """
  doc = ckpt_lib.read_meta(path)
  _check_identity(path, (doc.get('meta') or {}).get('run'), run)
  templates, shapes = templates
  items, doc = ckpt_lib.restore(path, templates, optional=('replay',))
  try:
    runner = _Runner.from_json(doc['meta']['runner'])
  except (KeyError, TypeError, ValueError) as e:
    raise ckpt_lib.CheckpointError(
        f'Checkpoint {path} has no usable runner state in its '
        f'{ckpt_lib.META_FILE} (not written by roxie train?): {e!r}') from None
  replay_restored = items.get('replay') is not None
  if progs.recipe.on_policy:
    replay = ()
  elif replay_restored:
    replay = items['replay']
  else:  # An empty replay is all zeros (see buffers.replay_init).
    replay = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes.replay)
  loop_item = items['loop']
  state = loop_item['state']._replace(agent=items['agent'], replay=replay)
  return (state, jnp.asarray(loop_item['runner_key']), runner,
          replay_restored, loop_item.get('host_physics'))


def _save_checkpoint(out: str, progs: Programs, state, key, runner: _Runner,
                     run: Any, csv_log, *, wall: float, save_replay: bool,
                     keep: int, host_rows=None) -> None:
  """Writes a checkpoint of `state` at runner.env_steps, and agent_state.npz.

  Args:
    out: the run directory.
    progs: the run's programs (their env holds the host physics).
    state: the LoopState.
    key: the runner's evaluation key.
    runner: the runner's counters (its csv and wall fields are set here).
    run: the RunConfig (or config.json's object).
    csv_log: the metrics.csv writer (its text is stored with the items).
    wall: seconds trained so far.
    save_replay: whether the replay is an item.
    keep: how many checkpoints to keep.
    host_rows: the host physics rows to save (default: read from
      `progs.env`; a population member passes its own).
  """
  run = as_run_config(run)
  jax.block_until_ready(state)  # Host physics is read after the program ran.
  saved = dataclasses.replace(runner, csv_rows=csv_log.rows,
                              csv_columns=csv_log.columns, wall_time=wall)
  agent_only = run.agent_only
  ckpt_meta = {'run': run.identity(),
               'runner': saved.to_json(),
               'replay_saved': bool(save_replay and not agent_only
                                    and not progs.recipe.on_policy)}
  from roxie import __version__  # pylint: disable=g-import-not-at-top
  ckpt_meta['roxie_version'] = __version__
  if agent_only:  # This process's copy of the replicated agent state.
    ckpt_meta['contents'] = AGENT_ONLY
    items = {'agent': distributed.local_copy(state.agent)}
  else:
    items = _items(progs, state, key, save_replay, host_rows)
  ckpt_lib.save(out, runner.env_steps, items, meta=ckpt_meta, keep=keep,
                files={METRICS_FILE: csv_log.text()})
  save_agent_state(os.path.join(out, STATE_FILE),
                   distributed.local_copy(state.agent))


def load_run_agent_state(run_dir: str, template):
  """A run's trained agent state: its latest checkpoint's, else agent_state.npz.

  Args:
    run_dir: a run directory.
    template: the agent state's structure (e.g. `jax.eval_shape` of
      `recipe.init`).

  Raises:
    FileNotFoundError: the run has neither.
    roxie.checkpoint.CheckpointError / ValueError: unreadable or not fitting.
  """
  path = ckpt_lib.latest(run_dir)
  if path is None:
    state = load_agent_state(os.path.join(run_dir, STATE_FILE), template)
    where = os.path.join(run_dir, STATE_FILE)
  else:
    try:
      items, _ = ckpt_lib.restore(path, {'agent': template})
    except ckpt_lib.CheckpointError as e:
      raise ckpt_lib.CheckpointError(f'{e}{older_checkpoint_hint(path)}'
                                     ) from None
    state = jax.tree.map(jnp.asarray, items['agent'])
    where = path
  bad = nonfinite_leaves(state)
  if bad:
    raise ValueError(
        f'{where}: the trained policy cannot be used: '
        f'{_nonfinite_message(bad, _count_inexact(state), "its agent state")}'
        '. Training diverged; an older checkpoint of the run may still be '
        'finite.')
  return state


def older_checkpoint_hint(path: str) -> str:
  """For a damaged checkpoint: the newest older one that reads, and how."""
  run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
  here = os.path.basename(os.path.normpath(path))
  for step in reversed(ckpt_lib.list_steps(run_dir)):
    older = os.path.join(ckpt_lib.checkpoint_dir(run_dir),
                         ckpt_lib.step_name(step))
    if ckpt_lib.step_name(step) >= here:
      continue
    try:
      ckpt_lib.read_meta(older)
    except ckpt_lib.CheckpointError:
      continue
    return (f'\nAn older checkpoint, {older}, looks intact: to use it, move '
            f'the damaged one out of the way (mv {path} '
            f'{os.path.dirname(path)}/damaged-{here}) and run the command '
            'again.')
  return ''
