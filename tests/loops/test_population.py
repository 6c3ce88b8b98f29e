"""A population of runs in one program: members equal single runs by seed.

`make_population_loop` vmaps the single-run program over members; member k
of a population started from seeds (s_0, ..., s_{P-1}) must compute what the
single run with seed s_k computes. Where the comparison is exact it says so:
XLA may pick other kernels for a batched matrix product than for P separate
ones, and then only allclose holds.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from roxie import distributed
from roxie import envs
from roxie import loops
from roxie.loops import population as population_lib
from roxie.types import EnvSpec, Recipe, ReplaySpec, Transition

from toy_envs import RandomStartIntegrator  # pylint: disable=g-bad-import-order

SEEDS = (3, 5, 11)


def noisy_recipe(spec: EnvSpec, *, warmup_steps: int = 8) -> Recipe:
  """Off-policy: a noisy linear policy, a reward model fitted by Adam.

  Every piece of randomness (init, exploration noise, replay sampling, the
  update's own noise) comes from the member's keys, so members differ.
  """
  o, a = spec.obs_size, spec.action_size
  opt = optax.adam(1e-2)

  def init(key, env_spec):
    del env_spec
    k1, k2 = jax.random.split(key)
    model = {'w': jax.random.normal(k1, (o + a,)), 'b': jnp.zeros(())}
    return {'policy': 0.5 * jax.random.normal(k2, (o, a)), 'model': model,
            'opt': opt.init(model)}

  def act(state, obs, key, *, explore):
    mean = jnp.tanh(obs @ state['policy'])
    noise = 0.3 * jax.random.normal(key, mean.shape) if explore else 0.0
    return mean + noise, {}

  def update(state, batch: Transition, key):
    x = jnp.concatenate([batch.obs, batch.action], -1)
    jitter = 0.01 * jax.random.normal(key, batch.reward.shape)

    def loss(m):
      pred = x @ m['w'] + m['b']
      return jnp.mean(jnp.square(pred - batch.reward - jitter))

    value, grads = jax.value_and_grad(loss)(state['model'])
    updates, opt_state = opt.update(grads, state['opt'])
    model = optax.apply_updates(state['model'], updates)
    policy = state['policy'] + 1e-3 * model['w'][:o, None]
    return dict(state, model=model, opt=opt_state, policy=policy), {
        'loss': value}

  return Recipe(name='noisy', config=None, init=init, act=act, update=update,
                on_policy=False,
                replay=ReplaySpec(capacity=200, batch_size=8, n_step=2,
                                  discount=0.9),
                steps_per_iteration=1, updates_per_iteration=2,
                warmup_steps=warmup_steps)


def _single_runs(recipe, env, calls, iterations):
  """The single run of every seed: (final state, outputs) per seed."""
  init, run = loops.make_compiled_loop(recipe, env, iterations=iterations)
  results = []
  for s in SEEDS:
    state, outs = init(jax.random.PRNGKey(s)), []
    for _ in range(calls):
      state, out = run(state)
      outs.append(out)
    results.append((jax.device_get(state), jax.device_get(outs)))
  return results


def _population_run(recipe, env, calls, iterations):
  init, run = loops.make_population_loop(recipe, env, population=len(SEEDS),
                                         iterations=iterations)
  state, outs = init(loops.population_keys(SEEDS)), []
  for _ in range(calls):
    state, out = run(state)
    outs.append(out)
  return jax.device_get(state), jax.device_get(outs)


def _max_diff(a, b) -> float:
  pairs = [(np.asarray(x, np.float64), np.asarray(y, np.float64))
           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))]
  return max(float(np.max(np.abs(x - y), initial=0.0)) for x, y in pairs)


def test_member_k_is_the_single_run_with_seed_k():
  env = RandomStartIntegrator(num_envs=2, length=5)
  recipe = noisy_recipe(env.spec)
  calls, iterations = 3, 40  # (37 + 40 + 40) x 2 = 234 updates each.
  singles = _single_runs(recipe, env, calls, iterations)
  state, outs = _population_run(recipe, env, calls, iterations)
  assert jax.tree.leaves(state)[0].shape[0] == len(SEEDS)
  for k, (single, single_outs) in enumerate(singles):
    mine = loops.member(state, k)
    # Not bit for bit: XLA:CPU lowers the members' batched products and
    # means (dot_general and reduce over [P, N, ...]) with other loop
    # orders than the single run's, which moves float32 results by an ulp
    # (3e-8 here after 234 updates; the episode counts, iteration and keys
    # stay exact).
    assert _max_diff(mine.agent, single.agent) < 1e-6, k
    assert _max_diff(mine.replay, single.replay) < 1e-6, k
    np.testing.assert_allclose(mine.env.obs, single.env.obs, atol=1e-6)
    np.testing.assert_array_equal(mine.key, single.key)
    assert int(mine.iteration) == int(single.iteration) == calls * iterations
    for out, single_out in zip(outs, single_outs):
      assert int(out.updates[k]) == int(single_out.updates)
      assert int(out.stats.completed[k]) == int(single_out.stats.completed)
      assert _max_diff(loops.member(out, k), single_out) < 1e-5
  # The members really differ (their seeds do).
  assert _max_diff(loops.member(state, 0).agent,
                   loops.member(state, 1).agent) > 1e-3
  # 2 env steps per iteration: iteration 4 completes the 8-step warm-up.
  assert int(outs[0].updates[0]) == 40 - 3


def test_native_population_steps_every_member_in_one_callback_per_step():
  env = envs.make('PendulumSwingup', backend='cpu', num_envs=2,
                  episode_length=6, nthread=1)
  recipe = noisy_recipe(env.spec, warmup_steps=4)
  p, iterations = len(SEEDS), 9
  pop_env = population_lib.population_env(env, p)
  physics = pop_env.physics
  assert physics.inner.num_envs == p * env.num_envs
  calls = []
  physics.inner.step_hook = lambda t0, t1: calls.append(1)
  init, run = loops.make_population_loop(recipe, pop_env, population=p,
                                         iterations=iterations)
  state = init(loops.population_keys(SEEDS))
  state, out = run(state)
  jax.block_until_ready(state)
  # One host step for all members' envs per env step (not p of them).
  assert len(calls) == iterations * recipe.steps_per_iteration
  rows = pop_env.get_host_state()
  assert rows.shape[:2] == (p, env.num_envs)

  singles = []
  init1, run1 = loops.make_compiled_loop(recipe, env, iterations=iterations)
  for s in SEEDS:
    s1, o1 = run1(init1(jax.random.PRNGKey(s)))
    singles.append((jax.device_get(s1), jax.device_get(o1),
                    env.get_host_state()))
  for k, (s1, o1, rows1) in enumerate(singles):
    mine = loops.member(jax.device_get(state), k)
    # Same actions in, same physics out: each member's mujoco rows are the
    # single run's, and so are its episodes (9 steps of 6-step episodes:
    # one finished per env).
    np.testing.assert_array_equal(rows[k], rows1)
    np.testing.assert_array_equal(mine.env.obs, s1.env.obs)
    assert int(out.stats.completed[k]) == int(o1.stats.completed) == 2
    np.testing.assert_allclose(out.stats.completed_return[k],
                               o1.stats.completed_return, rtol=1e-6)
    assert _max_diff(mine.agent, s1.agent) < 1e-6


def test_native_population_resets_only_masked_envs_and_skips_idle_calls():
  env = envs.make('PendulumSwingup', backend='cpu', num_envs=2, nthread=1)
  pop_env = population_lib.population_env(env, 3)
  physics = pop_env.physics
  state = jax.jit(jax.vmap(pop_env.reset))(loops.population_keys(SEEDS))
  before = physics.get_host_state()
  mask = jnp.zeros((3, 2), bool).at[1, 0].set(True)
  qpos = jnp.full((3, 2, env.model.nq), 0.5)
  qvel = jnp.zeros((3, 2, env.model.nv))
  reset = jax.jit(jax.vmap(physics.reset))
  token, view = reset(state.physics, mask, qpos, qvel)
  # Only member 1's env 0 was reset, in the one shared host batch.
  changed = np.any(physics.get_host_state() != before, axis=-1)
  np.testing.assert_array_equal(changed, [[0, 0], [1, 0], [0, 0]])
  np.testing.assert_allclose(view['qpos'][1, 0], 0.5)
  assert np.all(np.asarray(token) == np.asarray(token)[0])
  # When no env of any member asks, no host call happens (the token stays).
  idle, _ = reset(token, jnp.zeros((3, 2), bool), qpos, qvel)
  np.testing.assert_array_equal(idle, token)
  # Outside a vmap over its members the physics refuses to run.
  with pytest.raises(Exception, match='only runs vmapped'):
    jax.block_until_ready(jax.jit(physics.reset)(token[0], mask[0], qpos[0],
                                                 qvel[0]))


def test_population_refuses_what_it_cannot_run():
  env = RandomStartIntegrator(num_envs=2, length=5)
  recipe = noisy_recipe(env.spec)
  with pytest.raises(ValueError, match='population must be >= 1'):
    loops.make_population_loop(recipe, env, population=0)
  sharded = distributed.shard_env(env, distributed.make_mesh(1))
  with pytest.raises(ValueError, match='one device'):
    loops.make_population_loop(recipe, sharded, population=2)

  @dataclasses.dataclass(frozen=True)
  class Pixels(RandomStartIntegrator):
    @property
    def spec(self):
      return super().spec._replace(
          obs_shapes=(('pixels', (8, 8, 3), 'uint8'),))
  with pytest.raises(ValueError, match='pixel observations'):
    loops.make_population_loop(recipe, Pixels(num_envs=2, length=5),
                               population=2)


def _tiny(name, spec):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  module = agents.get_agent(name)
  if name == 'sac':
    cfg = module.Config(hidden_sizes=(16, 16), layer_norm=False,
                        batch_size=16, warmup_steps=16, replay_capacity=400,
                        updates_per_iteration=2)
  else:
    cfg = module.Config(rollout_length=8, num_epochs=2, num_minibatches=2,
                        hidden_sizes=(16,))
  return module.make(cfg, spec)


@pytest.mark.slow  # ~1-2 min on 2 busy cores: SAC's and PPO's compiles, twice.
@pytest.mark.parametrize('name, calls, iterations', [('sac', 2, 60),
                                                     ('ppo', 2, 25)])
def test_sac_and_ppo_members_follow_their_single_runs(name, calls,
                                                      iterations):
  env = envs.make('PendulumSwingup', backend='cpu', num_envs=2,
                  episode_length=50, nthread=1)
  recipe = _tiny(name, env.spec)
  init, run = loops.make_population_loop(recipe, env, population=2,
                                         iterations=iterations)
  state = init(loops.population_keys(SEEDS[:2]))
  init1, run1 = loops.make_compiled_loop(recipe, env, iterations=iterations)
  updates = 0
  for _ in range(calls):
    state, out = run(state)
    updates += int(out.updates[0])
  for k, s in enumerate(SEEDS[:2]):
    single = init1(jax.random.PRNGKey(s))
    for _ in range(calls):
      single, out1 = run1(single)
    mine = loops.member(jax.device_get(state), k)
    # Batched vs unbatched products differ by an ulp per update (see
    # above); over these updates the parameters stay within 1e-4.
    assert _max_diff(mine.agent, jax.device_get(single.agent)) < 1e-4, (
        name, k, _max_diff(mine.agent, jax.device_get(single.agent)))
  # A few hundred gradient steps: SAC 2 per learning iteration, PPO 4 per
  # update (2 epochs x 2 minibatches).
  assert updates * (2 if name == 'sac' else 4) >= 200, updates


@pytest.mark.slow  # ~1-2 min on 2 busy cores: two MJX programs.
def test_mjx_population_members_follow_their_single_runs():
  env = envs.make('PendulumSwingup', backend='mjx', num_envs=2,
                  episode_length=6)
  recipe = noisy_recipe(env.spec, warmup_steps=4)
  p, iterations = 2, 9
  init, run = loops.make_population_loop(recipe, env, population=p,
                                         iterations=iterations)
  state, out = run(init(loops.population_keys(SEEDS[:p])))
  init1, run1 = loops.make_compiled_loop(recipe, env, iterations=iterations)
  for k, s in enumerate(SEEDS[:p]):
    single, out1 = run1(init1(jax.random.PRNGKey(s)))
    mine = loops.member(jax.device_get(state), k)
    np.testing.assert_allclose(mine.env.obs, single.env.obs, atol=1e-5)
    assert int(out.stats.completed[k]) == int(out1.stats.completed) == 2
    assert _max_diff(mine.agent, jax.device_get(single.agent)) < 1e-5
