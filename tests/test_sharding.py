"""The data-parallel compiled loop over several devices.

Several CPU devices exist only if XLA is told so before JAX initialises, so
every multi-device check runs this file as a script in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=D and reads back one line of
JSON; the test session itself keeps its single device. The subprocesses share
the session's persistent compile cache.

The helpers here (a tiny pure-JAX env, a deterministic recipe, the worker
scenarios) are also used by tests/test_multihost.py's workers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from roxie import distributed
from roxie import loops
from roxie.types import EnvSpec, Recipe, ReplaySpec, Transition
from toy_envs import RandomStartIntegrator  # pylint: disable=g-bad-import-order

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT = 'RESULT '


# -- a tiny environment and a deterministic recipe -----------------------------


# The integrator (x0 ~ U(-1, 1), x' = x + 0.2 a) lives in toy_envs.py.
Integrator = RandomStartIntegrator


def linear_recipe(spec: EnvSpec, *, batch_size: int = 8,
                  capacity: int = 256) -> Recipe:
  """A deterministic off-policy recipe: a fixed linear policy, and a reward
  model (a small tanh layer) fitted by Adam on mean squared error.

  The policy never changes, so env trajectories depend only on the env; the
  update is a deterministic function of the batch, with batch means.
  """
  o, a, h = spec.obs_size, spec.action_size, 8
  opt = optax.adam(1e-2)

  def init(key, env_spec):
    del env_spec
    k1, k2, k3 = jax.random.split(key, 3)
    model = {'w1': jax.random.normal(k1, (o + a, h)) / np.sqrt(o + a),
             'w2': jax.random.normal(k2, (h,)) / np.sqrt(h),
             'b': jnp.zeros(())}
    return {'policy': 0.5 * jax.random.normal(k3, (o, a)), 'model': model,
            'opt': opt.init(model)}

  def act(state, obs, key, *, explore):
    del key, explore
    return jnp.tanh(obs @ state['policy']), {}

  def update(state, batch: Transition, key):
    del key
    x = jnp.concatenate([batch.obs, batch.action], -1)

    def loss(m):
      pred = jnp.tanh(x @ m['w1']) @ m['w2'] + m['b']
      target = batch.reward + batch.discount * jnp.mean(batch.next_obs, -1)
      return jnp.mean(jnp.square(pred - target))

    value, grads = jax.value_and_grad(loss)(state['model'])
    updates, opt_state = opt.update(grads, state['opt'])
    model = optax.apply_updates(state['model'], updates)
    return dict(state, model=model, opt=opt_state), {'loss': value}

  return Recipe(name='linear', config=None, init=init, act=act, update=update,
                on_policy=False,
                replay=ReplaySpec(capacity=capacity, batch_size=batch_size,
                                  n_step=1, discount=0.9),
                steps_per_iteration=1, updates_per_iteration=1,
                warmup_steps=0)


def tiny_sac(spec: EnvSpec, **overrides):
  from roxie.agents import sac  # pylint: disable=g-import-not-at-top
  kw = dict(hidden_sizes=(32, 32), layer_norm=False,
            batch_size=64, warmup_steps=200, replay_capacity=4000,
            updates_per_iteration=1, actor_lr=1e-3, critic_lr=1e-3)
  kw.update(overrides)
  return sac.make(sac.Config(**kw), spec)


def digest(tree) -> dict:
  """Sum and SHA-1 of a pytree's leaves (host copies)."""
  leaves = [np.asarray(x) for x in jax.tree.leaves(distributed.local_copy(tree))]
  h = hashlib.sha1()
  for x in leaves:
    h.update(np.ascontiguousarray(x).tobytes())
  return {'sum': float(sum(np.sum(x, dtype=np.float64) for x in leaves)),
          'sha1': h.hexdigest()}


def max_diff(a, b) -> float:
  """Largest absolute difference between the float leaves of two pytrees."""
  a, b = distributed.local_copy(a), distributed.local_copy(b)
  pairs = [(np.asarray(x, np.float64), np.asarray(y, np.float64))
           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
           if jnp.issubdtype(jnp.result_type(x), jnp.floating)]
  return float(max(np.max(np.abs(x - y)) for x, y in pairs))


def collectives(compiled_text: str) -> dict:
  """Collective ops in an HLO dump: counts, and the largest all-gather."""
  import re  # pylint: disable=g-import-not-at-top
  ops = ('all-reduce', 'all-gather', 'all-to-all', 'collective-permute',
         'reduce-scatter')
  out = {op: 0 for op in ops}
  biggest = 0
  for line in compiled_text.splitlines():
    m = re.search(r' = (.*?) (%s)(-start)?\(' % '|'.join(ops), line)
    if m:
      out[m.group(2)] += 1
      if m.group(2) == 'all-gather':
        for dims in re.findall(r'\w+\[([\d,]*)\]', m.group(1)):
          sizes = [int(v) for v in dims.split(',') if v]
          biggest = max(biggest, int(np.prod(sizes)) if sizes else 1)
  out['largest_all_gather'] = biggest
  return out


# -- running workers -----------------------------------------------------------


def worker_environ(devices: int) -> dict:
  env = dict(os.environ)
  env['XLA_FLAGS'] = (env.get('XLA_FLAGS', '') +
                      f' --xla_force_host_platform_device_count={devices}')
  env['JAX_PLATFORMS'] = 'cpu'
  env.setdefault('ROXIE_JAX_CACHE', os.path.join(ROOT, '.jax_cache'))
  env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
  return env


def parse_result(stdout: str) -> dict:
  lines = [l for l in stdout.splitlines() if l.startswith(RESULT)]
  assert lines, f'no result line in:\n{stdout[-3000:]}'
  return json.loads(lines[-1][len(RESULT):])


def run_worker(scenario: str, devices: int, timeout: float = 300) -> dict:
  proc = subprocess.run(
      [sys.executable, os.path.abspath(__file__), scenario, str(devices)],
      env=worker_environ(devices), cwd=ROOT, capture_output=True, text=True,
      timeout=timeout, check=False)
  assert proc.returncode == 0, (
      f'{scenario} on {devices} devices failed:\n{proc.stdout[-3000:]}\n'
      f'{proc.stderr[-6000:]}')
  return parse_result(proc.stdout)


def configure_worker_jax():
  """The test session's JAX settings, for a worker process."""
  jax.config.update('jax_numpy_rank_promotion', 'raise')
  jax.config.update('jax_compilation_cache_dir',
                    os.environ.get('ROXIE_JAX_CACHE',
                                   os.path.join(ROOT, '.jax_cache')))
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)


# -- in the test session (one device) ------------------------------------------


def test_one_device_mesh_reproduces_the_unsharded_loop():
  env = Integrator(num_envs=4)
  recipe = linear_recipe(env.spec)
  mesh = distributed.make_mesh(1)
  results = []
  for m in (None, mesh):
    init, run = loops.make_compiled_loop(recipe, env, iterations=6, mesh=m)
    state = init(jax.random.PRNGKey(3))
    for _ in range(2):
      state, out = run(state)
    results.append((state, out))
  (s0, o0), (s1, o1) = results
  # The sharded state keeps the env and replay with a leading device axis.
  assert s1.env.obs.shape == (1,) + s0.env.obs.shape
  assert s1.replay.obs.shape == (1,) + s0.replay.obs.shape
  np.testing.assert_array_equal(s1.env.obs[0], s0.env.obs)
  np.testing.assert_array_equal(s1.replay.reward[0], s0.replay.reward)
  assert max_diff(s0.agent, s1.agent) == 0.0
  assert int(o0.updates) == int(o1.updates) == 6
  assert int(o0.stats.completed) == int(o1.stats.completed)
  np.testing.assert_array_equal(o1.stats.episode_return,
                                o0.stats.episode_return)


def test_local_copy_and_mesh_errors():
  x = jax.device_put(jnp.arange(3.0),
                     distributed.replicated(distributed.make_mesh(1)))
  np.testing.assert_array_equal(distributed.local_copy(x), [0.0, 1.0, 2.0])
  with pytest.raises(ValueError, match='available'):
    distributed.make_mesh(len(jax.devices()) + 1)


# -- in subprocesses (several devices) -----------------------------------------


@pytest.mark.parametrize('devices',
                         [2, pytest.param(4, marks=pytest.mark.slow)])
def test_data_parallel_update_equals_one_device_on_the_whole_batch(devices):
  r = run_worker('update', devices)
  # The deterministic recipe: D devices holding different batches give the
  # 1-device update of their concatenation; D devices holding the same batch
  # give the 1-device update of that one batch (the gradients are averaged).
  assert r['linear_moved'] > 1e-3
  assert r['linear_distinct'] < 1e-6, r
  assert r['linear_identical'] < 1e-6, r
  # SAC, one update: the same batch on every device equals one device on the
  # batch repeated D times; different batches equal their concatenation.
  assert r['sac_moved'] > 1e-4
  assert r['sac_doubled'] < 1e-5, r
  assert r['sac_distinct'] < 1e-5, r
  assert r['replicated'], r
  assert r['collectives']['all-reduce'] > 0, r
  assert r['collectives']['all-gather'] == 0, r
  if devices == 2:  # PPO (on-policy): a [T, B] rollout split over B.
    assert r['ppo_moved'] > 1e-4
    assert r['ppo_distinct'] < 1e-5, r


@pytest.mark.slow  # ~1 min on 2 busy cores: SAC's compile.
def test_sharded_sac_loop_learns_and_keeps_replay_local():
  r = run_worker('learn', 2)
  # Per device: 4 of 8 envs and a [rows, 4] replay ring; 32 of 64 samples.
  assert r['obs_shape'] == [2, 4, 1] and r['replay_shape'][:1] == [2], r
  assert r['replay_shape'][2] == 4, r
  assert r['first_eval'] < 7.0 and r['final_eval'] > 8.3, r
  # Collectives: all-reduces (gradients, metrics) and the [num_envs]
  # episode statistics gathered once per call; nothing replay-sized.
  c = r['collectives']
  assert c['all-reduce'] > 0 and c['all-to-all'] == 0, c
  assert c['largest_all_gather'] <= 8, c
  assert r['replicated'], r


def test_native_shards_drive_their_own_simulations():
  r = run_worker('native', 2)
  # Each device's shard has its own mujoco.batch (2 envs, threads split).
  assert r['batches'] == 2 and r['batch_sizes'] == [2, 2], r
  assert r['threads'] == [max(1, (os.cpu_count() or 1) // 2)] * 2, r
  # Shard i follows exactly the trajectory of a separate 2-env native env
  # reset with that shard's key and driven by the same (fixed) policy, and
  # the loop's episode statistics are those of the separate shards.
  assert r['shard_trajectory_diff'] == [0.0, 0.0], r
  assert r['completed'] == r['solo_completed'] == 4 * 60 // 20, r
  np.testing.assert_allclose(r['completed_return'],
                             r['solo_completed_return'], rtol=1e-6)
  assert r['updates'] == 59, r  # Replay can sample from the second step on.
  assert r['uneven_error'], r


@pytest.mark.slow  # ~1 min on 2 busy cores: compiling MJX twice.
def test_mjx_shards_match_separate_envs():
  r = run_worker('mjx', 2, timeout=600)
  # Pure-JAX physics under shard_map: the same trajectories as separate
  # 2-env MJX envs (up to XLA's float reassociation between programs).
  assert max(r['shard_trajectory_diff']) < 1e-4, r
  assert r['completed'] == r['solo_completed'] == 4 * 60 // 20, r
  np.testing.assert_allclose(r['completed_return'],
                             r['solo_completed_return'], rtol=1e-4)
  assert r['updates'] == 59, r


@pytest.mark.slow  # ~1.5 min on 2 busy cores: SAC's and the evaluator's compiles.
def test_cli_num_devices_trains_and_checkpoints(tmp_path):
  # SAC's default action repeat (4) wraps the env: sharding reaches through
  # the wrapper. Episodes (40) and steps (12 calls of 4 envs x 4) fit it.
  out_dir = tmp_path / 'run'
  env = worker_environ(1)
  env.pop('XLA_FLAGS')  # `--num-devices` alone must split the CPU.
  proc = subprocess.run(
      [sys.executable, '-m', 'roxie.cli', 'train', '--agent', 'sac',
       '--task', 'PendulumSwingup', '--num-envs', '4', '--steps', '192',
       '--episode-length', '40', '--eval-episodes', '2', '--set',
       'warmup_steps=100', '--set', 'batch_size=32', '--set',
       'hidden_sizes=16,16', '--num-devices', '2', '--out', str(out_dir),
       '--quiet'], env=env, cwd=ROOT, capture_output=True, text=True,
      timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert 'final eval_return=' in proc.stdout and 'env_steps=192' in proc.stdout
  with open(out_dir / 'config.json') as f:
    assert json.load(f)['num_devices'] == 2
  assert os.listdir(out_dir / 'checkpoints')
  # Uneven splits are refused before anything runs.
  bad = subprocess.run(
      [sys.executable, '-m', 'roxie.cli', 'train', '--num-envs', '3',
       '--num-devices', '2', '--out', str(tmp_path / 'bad')], env=env,
      cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
  assert bad.returncode == 2 and 'multiple of --num-devices' in bad.stderr
  assert not (tmp_path / 'bad').exists()


# -- worker scenarios ----------------------------------------------------------


def _put(x, mesh, spec):
  return jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))


def _random_batch(rng, n, o, a):
  return Transition(
      obs=rng.normal(size=(n, o)).astype(np.float32),
      action=rng.uniform(-1, 1, size=(n, a)).astype(np.float32),
      reward=rng.normal(size=(n,)).astype(np.float32),
      discount=np.full((n,), 0.99, np.float32),
      next_obs=rng.normal(size=(n, o)).astype(np.float32))


def scenario_update(devices: int) -> dict:
  mesh = distributed.make_mesh(devices)
  rep, row = jax.sharding.PartitionSpec(), jax.sharding.PartitionSpec('data')
  spec = EnvSpec(task='Fake', obs_size=3, action_size=2,
                 obs_names=(('x', 3),), control_timestep=0.1,
                 episode_length=10)
  rng = np.random.default_rng(0)
  key = jax.random.PRNGKey(1)
  out = {}
  for name, recipe, n in (('linear', linear_recipe(spec), 8),
                          ('sac', tiny_sac(spec), 16)):
    agent = recipe.init(jax.random.PRNGKey(0), spec)
    one = jax.jit(recipe.update)
    many = jax.jit(distributed.data_parallel_update(recipe.update, mesh))
    agent_rep = _put(agent, mesh, rep)
    # Different data on every device vs one device on all of it.
    whole = _random_batch(rng, devices * n, 3, 2)
    a1, _ = one(agent, whole, key)
    ad, _ = many(agent_rep, _put(whole, mesh, row), key)
    out[f'{name}_distinct'] = max_diff(a1, ad)
    out[f'{name}_moved'] = max_diff(a1, agent)
    # The same data x on every device.
    x = _random_batch(rng, n, 3, 2)
    tiled = jax.tree.map(lambda v: np.concatenate([v] * devices), x)
    ad, _ = many(agent_rep, _put(tiled, mesh, row), key)
    if name == 'linear':  # Deterministic: equals the update on x itself.
      out['linear_identical'] = max_diff(one(agent, x, key)[0], ad)
    else:  # SAC draws noise per sample: compare with the doubled batch.
      out['sac_doubled'] = max_diff(one(agent, tiled, key)[0], ad)
    if name == 'sac':
      out['replicated'] = all(
          l.sharding.is_fully_replicated and len(l.sharding.device_set) ==
          devices for l in jax.tree.leaves(ad))
      out['collectives'] = collectives(
          many.lower(agent_rep, _put(tiled, mesh, row), key).compile()
          .as_text())
  if devices == 2:  # PPO's compile is slow; its sharding is the same at 4.
    out['ppo_distinct'], out['ppo_moved'] = _ppo_update(devices, mesh, spec)
  return out


def _ppo_update(devices, mesh, spec):
  """PPO's update on a [T, B] rollout sharded over B vs on one device."""
  from roxie.agents import ppo  # pylint: disable=g-import-not-at-top
  from roxie.types import Rollout  # pylint: disable=g-import-not-at-top
  t, b = 4, 2 * devices
  recipe = ppo.make(ppo.Config(rollout_length=t, num_epochs=2,
                               num_minibatches=2, hidden_sizes=(16,)), spec)
  agent = recipe.init(jax.random.PRNGKey(0), spec)
  rng = np.random.default_rng(1)
  obs = rng.normal(size=(t, b, 3)).astype(np.float32)
  action, extras = jax.vmap(lambda o, k: recipe.act(agent, o, k))(
      obs, jax.random.split(jax.random.PRNGKey(2), t))
  rollout = Rollout(
      obs=obs, action=np.asarray(action), reward=rng.normal(
          size=(t, b)).astype(np.float32),
      terminated=np.zeros((t, b), bool), truncated=rng.random((t, b)) < 0.2,
      final_obs=rng.normal(size=(t, b, 3)).astype(np.float32),
      extras=jax.tree.map(np.asarray, extras),
      last_obs=rng.normal(size=(b, 3)).astype(np.float32))
  by_env = jax.sharding.PartitionSpec(None, 'data')
  specs = Rollout(*([by_env] * 7), last_obs=jax.sharding.PartitionSpec(
      'data'))
  key = jax.random.PRNGKey(3)
  one = jax.jit(recipe.update)(agent, rollout, key)[0]
  many = jax.jit(distributed.data_parallel_update(recipe.update, mesh, specs))(
      _put(agent, mesh, jax.sharding.PartitionSpec()),
      jax.tree.map(lambda x, sp: _put(x, mesh, sp), rollout, specs,
                   is_leaf=lambda x: isinstance(x, dict)), key)[0]
  return max_diff(one, many), max_diff(one, agent)


def scenario_learn(devices: int) -> dict:
  mesh = distributed.make_mesh(devices)
  env = Integrator(num_envs=8)
  recipe = tiny_sac(env.spec)
  init, run = loops.make_compiled_loop(recipe, env, iterations=50, mesh=mesh)
  evaluate = loops.make_evaluator(recipe, Integrator(num_envs=16))
  state = init(jax.random.PRNGKey(0))
  out = {'obs_shape': list(state.env.obs.shape),
         'replay_shape': list(state.replay.obs.shape)}
  out['collectives'] = collectives(run.lower(state).compile().as_text())
  evals = []
  for _ in range(10):
    state, _ = run(state)
    evals.append(float(evaluate(distributed.local_copy(state.agent),
                                jax.random.PRNGKey(1)).mean))
  out['first_eval'], out['final_eval'] = evals[0], max(evals[-3:])
  out['evals'] = evals
  out['replicated'] = all(l.sharding.is_fully_replicated
                          for l in jax.tree.leaves(state.agent))
  return out


def scenario_native(devices: int, backend: str = 'cpu') -> dict:
  from roxie import envs  # pylint: disable=g-import-not-at-top
  mesh = distributed.make_mesh(devices)
  b, length, iters = 4, 20, 60
  out = {}
  t0 = time.time()
  env = distributed.make_sharded_env('PendulumSwingup', mesh=mesh,
                                     backend=backend, num_envs=b,
                                     episode_length=length)
  if backend == 'cpu':
    parts = env.local.physics.parts
    out['batches'] = len(parts)
    out['batch_sizes'] = [p.num_envs for p in parts]
    out['threads'] = [p.batch.nthread for p in parts]
  recipe = linear_recipe(env.spec, batch_size=4, capacity=400)
  init, run = loops.make_compiled_loop(recipe, env, iterations=iters)
  key = jax.random.PRNGKey(5)
  state, o = run(init(key))
  out['updates'] = int(o.updates)
  out['completed'] = int(o.stats.completed)
  out['completed_return'] = float(o.stats.completed_return)
  out['loop_seconds'] = round(time.time() - t0, 1)

  # Each shard again, on its own unsharded native env of b / D envs reset with
  # that shard's key and driven by the same fixed policy.
  agent = distributed.local_copy(state.agent)
  solo = envs.make('PendulumSwingup', backend=backend,
                   num_envs=b // devices, episode_length=length)

  @jax.jit
  def replay_shard(key):
    def body(carry, _):
      s, stats = carry
      s, ts = solo.step(s, recipe.act(agent, s.obs, None, explore=True)[0])
      return (s, loops.collect.update_stats(stats, ts)), None
    carry = (solo.reset(key), loops.collect.init_stats(solo.num_envs))
    (s, stats), _ = jax.lax.scan(body, carry, None, length=iters)
    return s.obs, stats

  k_env = jax.random.split(key, 3)[1]
  obs = np.asarray(jax.device_get(state.env.obs))
  diffs, completed, returns = [], 0, np.float32(0)
  for i in range(devices):
    solo_obs, stats = replay_shard(jax.random.fold_in(k_env, i))
    diffs.append(float(np.max(np.abs(np.asarray(solo_obs) - obs[i]))))
    completed += int(stats.completed)
    returns += np.float32(stats.completed_return)
  out['shard_trajectory_diff'] = diffs
  out['solo_completed'], out['solo_completed_return'] = completed, float(
      returns)
  try:
    distributed.shard_env(Integrator(num_envs=3), mesh)
    out['uneven_error'] = False
  except ValueError:
    out['uneven_error'] = True
  return out


SCENARIOS = {'update': scenario_update, 'learn': scenario_learn,
             'native': scenario_native,
             'mjx': lambda d: scenario_native(d, backend='mjx')}


def main(argv):
  scenario, devices = argv[0], int(argv[1])
  configure_worker_jax()
  assert len(jax.devices()) == devices, jax.devices()
  t0 = time.time()
  result = SCENARIOS[scenario](devices)
  result['seconds'] = round(time.time() - t0, 1)
  print(RESULT + json.dumps(result), flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])
