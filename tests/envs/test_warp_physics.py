"""MJX with impl='warp': MuJoCo Warp physics, here on Warp's CPU device.

The tests that simulate need NVIDIA Warp (roxie's optional `warp` extra) and
are skipped without it, as CI runs; the refusals run everywhere.

Tolerance. MJX computes in float32 and native MuJoCo in float64, and the
contact solver amplifies rounding: on CheetahRun (contacts on every step)
impl 'jax' and the native backend already differ by up to ~2.5e-4 in an
observation within 60 steps (measured with this file's rollout; Cartpole,
without contacts, ~3e-7). Warp is held to the same band against both: 1e-3
on observations and 1e-5 on rewards, with the auto-resets of 20-step
episodes inside the rollout, so a reset that mixed up a world's state with
the shared contact pool would show as an O(1) difference.
"""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from roxie import envs
from roxie.envs import mjx_backend
from roxie.envs import warp_render

B, T, EPISODE = 4, 60, 20


def _warp_or_skip():
  if not warp_render.warp_installed():
    pytest.skip('NVIDIA Warp is not installed (optional: roxie[warp]).')


def _rollout(task, **kw):
  env = envs.make(task, num_envs=B, episode_length=EPISODE, **kw)
  actions = jax.random.uniform(jax.random.PRNGKey(1),
                               (T, B, env.spec.action_size), minval=-1.,
                               maxval=1.)

  @jax.jit
  def run(key):
    def body(s, a):
      s, ts = env.step(s, a)
      return s, (ts.final_obs, ts.reward, ts.truncated)
    return jax.lax.scan(body, env.reset(key), actions)[1]

  return jax.tree.map(np.asarray, run(jax.random.PRNGKey(0)))


# PendulumSwingup: no contacts and no constraint rows at all (an njmax of 0
# was once refused).
@pytest.mark.parametrize('task', ['CartpoleSwingup', 'CheetahRun',
                                  'PendulumSwingup'])
def test_warp_follows_impl_jax_and_native_mujoco(task):
  _warp_or_skip()
  warp = _rollout(task, backend='mjx', impl='warp')
  for other in (_rollout(task, backend='mjx'), _rollout(task, backend='cpu')):
    np.testing.assert_allclose(warp[0], other[0], atol=1e-3, rtol=0)
    np.testing.assert_allclose(warp[1], other[1], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(warp[2], other[2])
  assert warp[2].sum() == B * (T // EPISODE)  # The resets happened.


def test_a_full_contact_pool_raises_instead_of_dropping_contacts():
  _warp_or_skip()
  env = envs.make('CheetahRun', backend='mjx', num_envs=2, impl='warp',
                  naconmax=1)
  step = jax.jit(env.step)
  state = env.reset(jax.random.PRNGKey(0))
  with pytest.raises(Exception, match='naconmax=1 .*naconmax=N'):
    for _ in range(50):  # The cheetah falls onto the floor: > 1 contact.
      state, ts = step(state, np.zeros((2, env.spec.action_size),
                                       np.float32))
      jax.block_until_ready(ts.reward)


def test_default_pool_is_the_static_bound_times_the_batch():
  _warp_or_skip()
  env = envs.make('CheetahRun', backend='mjx', num_envs=3, impl='warp')
  contacts, rows = mjx_backend._static_bounds(env.physics.model)  # pylint: disable=protected-access
  assert (contacts, rows) == (35, 146)
  assert env.physics.naconmax == 3 * 35 and env.physics.njmax == 146


def test_warp_batches_are_not_split():
  _warp_or_skip()
  env = envs.make('CartpoleSwingup', backend='mjx', num_envs=2, impl='warp')
  with pytest.raises(NotImplementedError, match='contact pool is shared'):
    env.physics.population(2)
  with pytest.raises(NotImplementedError, match='contact pool is shared'):
    env.physics.shard(1)


def test_warp_sizes_are_refused_elsewhere():
  with pytest.raises(ValueError, match="impl='warp' only"):
    envs.make('CartpoleSwingup', backend='mjx', num_envs=2, naconmax=8)
  with pytest.raises(ValueError, match="backend='mjx', impl='warp'"):
    envs.make('CartpoleSwingup', backend='cpu', num_envs=2, njmax=8)


def _roxie(*args, cwd):
  return subprocess.run([sys.executable, '-m', 'roxie.cli', *args], cwd=cwd,
                        capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize('flags,message', [
    (['--impl', 'warp'], 'add --backend mjx'),
    (['--impl', 'warp', '--backend', 'mjx', '--seeds', '0,1'],
     'not split into population members'),
])
def test_roxie_train_refuses_warp_where_it_cannot_run(tmp_path, flags,
                                                      message):
  out = tmp_path / 'run'
  r = _roxie('train', '--task', 'CartpoleSwingup', '--steps', '100',
             '--out', str(out), *flags, cwd=tmp_path)
  assert r.returncode == 2, r.stderr
  assert message in r.stderr
  assert not out.exists()


def test_roxie_train_without_warp_says_what_to_install(tmp_path):
  if warp_render.warp_installed():
    pytest.skip('Warp is installed here.')
  out = tmp_path / 'run'
  r = _roxie('train', '--task', 'CartpoleSwingup', '--steps', '100',
             '--backend', 'mjx', '--impl', 'warp', '--out', str(out),
             cwd=tmp_path)
  assert r.returncode == 2, r.stderr
  assert "pip install 'mujoco-mjx[warp]'" in r.stderr
  assert not out.exists()


def test_roxie_train_with_warp_physics_then_eval_on_the_native_backend(
    tmp_path):
  _warp_or_skip()
  out = tmp_path / 'run'
  r = _roxie('train', '--agent', 'sac', '--task', 'CheetahRun', '--backend',
             'mjx', '--impl', 'warp', '--steps', '1000', '--num-envs', '4',
             '--eval-every', '1000', '--eval-episodes', '2',
             '--episode-length', '100', '--set', 'warmup_steps=200',
             '--set', 'batch_size=32', '--set', 'hidden_sizes=32,32',
             '--out', str(out), '--quiet', cwd=tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  from roxie import run  # pylint: disable=g-import-not-at-top
  saved = run.load_run_config(str(out))[0]
  assert saved.backend == 'mjx' and saved.env_options['impl'] == 'warp'
  assert os.path.exists(out / 'metrics.csv')
  r = _roxie('eval', '--run', str(out), '--backend', 'cpu', '--episodes', '2',
             cwd=tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert 'eval_return=' in r.stdout


def test_resume_is_bit_exact_with_warp_physics(tmp_path):
  # The checkpoint holds the batch's mjx.Data with Warp's shared contact
  # pool; a run resumed from it must match the uninterrupted run leaf for
  # leaf (tests/test_resume.py's check, with impl 'warp').
  _warp_or_skip()
  import test_resume  # pylint: disable=g-import-not-at-top
  run_a, _ = test_resume.check_exact_resume('sac', 'mjx', tmp_path,
                                            env_options={'impl': 'warp'})
  from roxie import run  # pylint: disable=g-import-not-at-top
  assert run.load_run_config(str(run_a))[0].env_options['impl'] == 'warp'


def test_a_warp_runs_options_fit_the_native_backend_for_eval_and_export():
  # eval --backend cpu and export build the native env from the run's
  # env_options: the MJX-only ones are left out there, kept for MJX.
  from roxie import run  # pylint: disable=g-import-not-at-top
  options = {'episode_length': 20, 'impl': 'warp', 'naconmax': 64}
  assert run.env_kwargs(options, 'cpu') == {'episode_length': 20}
  assert run.env_kwargs(options, 'mjx') == options
  assert run.env_kwargs(options) == options
  envs.make('CartpoleSwingup', backend='cpu', num_envs=1,
            **run.env_kwargs(options, 'cpu'))
