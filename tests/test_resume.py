"""A resumed run is bit-exact with an uninterrupted one, for every agent.

Each case trains a tiny run A to 160 env steps, checkpointing at every
evaluation (40 steps), then copies A's directory as it would be after a crash
at 80 < steps < 120 (checkpoints after 80 deleted; metrics.csv still has the
rows of 120 and 160, which the resume must drop) and resumes the copy B to
160. Every leaf of B's final checkpoint (agent, loop state, runner key, host
physics, replay) must equal A's, and so must metrics.csv (but wall_time and
sps).

Both runs go through `roxie.run`'s program cache, so each case compiles
once. The kill tests, which resume in a fresh process, are in
test_resume_kill.py.

MJX: SAC always (off-policy, with replay); the other agents on MJX are marked
slow (each is a separate MJX compile, minutes on 2 cores).
"""

import csv
import dataclasses
import os
import shutil

import numpy as np
import pytest

from roxie import checkpoint as ckpt
from roxie import run as run_lib
from roxie.agents import AGENTS, get_agent

TASK = 'CartpoleBalance'
STEPS, EVAL_EVERY, CRASH_AFTER = 160, 40, 80
# The native backend's EnvState.physics is a version token that orders host
# callbacks; a restored run's tokens count from the host's own counter, so
# they differ from the uninterrupted run's. It carries no state.
NATIVE_TOKEN = "['state'].env.physics"


def tiny_overrides(agent: str):
  """Small networks and batches; fields a recipe lacks are left out."""
  wanted = dict(hidden_sizes=(16, 16), batch_size=16, warmup_steps=20,
                replay_capacity=64, num_atoms=11, num_samples=4,
                rollout_length=10, num_minibatches=2, num_epochs=2)
  fields = {f.name for f in dataclasses.fields(get_agent(agent).Config)}
  return {k: v for k, v in wanted.items() if k in fields}


def train_tiny(agent, backend, out, env_options=None, overrides=None,
               **kwargs):
  kwargs.setdefault('steps', STEPS)
  return run_lib.train(
      agent, TASK, backend=backend, num_envs=2, seed=3, out=str(out),
      overrides=dict(tiny_overrides(agent), **(overrides or {})),
      eval_every=EVAL_EVERY, eval_episodes=2,
      verbose=False, env_options=dict({'episode_length': 20},
                                      **(env_options or {})), **kwargs)


def read_rows(run_dir):
  with open(os.path.join(run_dir, run_lib.METRICS_FILE)) as f:
    return list(csv.DictReader(f))


def without_timing(rows):
  return [{k: v for k, v in r.items() if k not in ('wall_time', 'sps')}
          for r in rows]


def crash_copy(src, dst, after_step):
  """dst = src as if killed after the checkpoint of `after_step`."""
  shutil.copytree(src, dst)
  for step in ckpt.list_steps(dst):
    if step > after_step:
      shutil.rmtree(os.path.join(ckpt.checkpoint_dir(dst),
                                 ckpt.step_name(step)))
  return dst


def assert_same_checkpoints(path_a, path_b, skip=()):
  a, b = ckpt.read(path_a), ckpt.read(path_b)
  assert sorted(a) == sorted(b)
  compared = 0
  for item in a:
    assert sorted(a[item]) == sorted(b[item]), item
    for leaf in a[item]:
      if (item, leaf) in skip:
        continue
      np.testing.assert_array_equal(a[item][leaf], b[item][leaf],
                                    err_msg=f'{item}: {leaf}')
      compared += 1
  return compared


def check_exact_resume(agent, backend, tmp_path, tensorboard=False,
                       env_options=None, overrides=None):
  run_a = tmp_path / 'a'
  train_tiny(agent, backend, run_a, keep_checkpoints=10,
             tensorboard=tensorboard, env_options=env_options,
             overrides=overrides)
  assert ckpt.list_steps(run_a) == [40, 80, 120, 160]
  rows_a = read_rows(run_a)
  assert [int(r['env_steps']) for r in rows_a] == [40, 80, 120, 160]

  run_b = crash_copy(run_a, tmp_path / 'b', CRASH_AFTER)
  result = run_lib.resume(str(run_b), verbose=False, tensorboard=tensorboard)
  assert result.resumed_from == CRASH_AFTER
  assert result.env_steps == STEPS
  assert ckpt.list_steps(run_b) == [120, 160]  # keep_checkpoints=2

  skip = {('loop', NATIVE_TOKEN)} if backend == 'cpu' else set()
  compared = assert_same_checkpoints(
      os.path.join(ckpt.checkpoint_dir(run_a), ckpt.step_name(STEPS)),
      os.path.join(ckpt.checkpoint_dir(run_b), ckpt.step_name(STEPS)), skip)
  assert compared > 20
  rows_b = read_rows(run_b)
  assert without_timing(rows_b) == without_timing(rows_a)
  # Rows up to the checkpoint are the very same lines.
  assert rows_b[:2] == rows_a[:2]
  return run_a, run_b


# DDPG and TD3 share the off-policy skeleton with D4PG and TD4, which the
# fast suite resumes (~75 s on 2 cores for the two).
NATIVE_AGENTS = [pytest.param(a, marks=pytest.mark.slow)
                 if a in ('ddpg', 'td3') else a for a in AGENTS]


@pytest.mark.parametrize('agent', NATIVE_AGENTS)
def test_resume_is_bit_exact_on_the_native_backend(agent, tmp_path):
  run_a, run_b = check_exact_resume(agent, 'cpu', tmp_path,
                                    tensorboard=(agent == 'sac'))
  if agent == 'sac':
    for run_dir in (run_a, run_b):
      events = os.listdir(os.path.join(run_dir, run_lib.TENSORBOARD_DIR))
      assert any(e.startswith('events.out.tfevents') for e in events)


def test_resume_keeps_the_off_policy_observation_statistics(tmp_path):
  # normalize_observations puts running statistics in the agent state; a
  # resumed run must carry them on, not restart them (TD4: the skeleton's
  # recipe the fast suite already resumes above).
  run_a, _ = check_exact_resume('td4', 'cpu', tmp_path,
                                overrides={'normalize_observations': True})
  saved = ckpt.read(os.path.join(ckpt.checkpoint_dir(run_a),
                                 ckpt.step_name(STEPS)))
  counts = [v for item in saved.values() for k, v in item.items()
            if 'obs_stats' in k and 'count' in k]
  assert counts and int(counts[0][1]) > 0  # statistics of sampled batches


# MJX's env state is checkpointed the same whatever the agent: the fast suite
# resumes PPO there (SAC on MJX, ~130 s of compiling on 2 cores, is slow).
MJX_AGENTS = [a if a == 'ppo' else pytest.param(a, marks=pytest.mark.slow)
              for a in AGENTS]


@pytest.mark.parametrize('agent', MJX_AGENTS)
def test_resume_is_bit_exact_on_mjx(agent, tmp_path):
  check_exact_resume(agent, 'mjx', tmp_path)


def test_resume_without_replay_starts_empty_and_can_extend(tmp_path, capsys):
  """--no-save-replay: the resume says what it lost; --steps extends a run."""
  run_a = tmp_path / 'a'
  train_tiny('sac', 'cpu', run_a, save_replay=False, steps=80)
  path = ckpt.latest(str(run_a))
  assert 'replay' not in ckpt.read_meta(path)['items']
  result = run_lib.resume(str(run_a), steps=120, verbose=True,
                          save_replay=False)
  assert 'EMPTY replay' in capsys.readouterr().err
  assert result.env_steps == 120
  assert [int(r['env_steps']) for r in read_rows(run_a)] == [40, 80, 120]
  meta, _, _ = run_lib.load_run(str(run_a))
  assert meta['steps'] == 120
