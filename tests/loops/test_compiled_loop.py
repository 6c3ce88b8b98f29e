"""The compiled loop and the evaluator, on a tiny pure-JAX environment.

The environment is a 1-D integrator: obs = [x], x' = x + 0.1 * a, reward = -|x'|,
episodes truncate after `length` steps and reset x to 1. Everything about it
can be computed by hand, so the loop's bookkeeping can be checked exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import loops
from roxie.types import Recipe, ReplaySpec
from toy_envs import FixedStartIntegrator as Integrator  # pylint: disable=g-bad-import-order


def _constant_recipe(action_value, *, on_policy, **kw):
  """A recipe that always acts `action_value` and counts its updates."""

  def init(key, spec):
    del key, spec
    return {'updates': jnp.zeros((), jnp.int32), 'seen': jnp.zeros(())}

  def act(state, obs, key, *, explore):
    del state, key, explore
    return jnp.full((obs.shape[0], 1), action_value), {'v': obs[:, 0]}

  def update(state, data, key):
    del key
    if on_policy:
      seen = jnp.sum(data.reward)
    else:
      seen = jnp.sum(data.reward)
    return ({'updates': state['updates'] + 1, 'seen': seen},
            {'loss': jnp.float32(1.5)})

  return Recipe(name='const', config=None, init=init, act=act, update=update,
                on_policy=on_policy, **kw)


def test_evaluator_returns_hand_computed_episode_return():
  env = Integrator(num_envs=2, length=4)
  recipe = _constant_recipe(-1.0, on_policy=True, rollout_length=2)
  result = loops.make_evaluator(recipe, env)(recipe.init(None, env.spec),
                                             jax.random.PRNGKey(0))
  # x: 0.9, 0.8, 0.7, 0.6 -> return -(3.0)
  np.testing.assert_allclose(result.returns, [-3.0, -3.0], rtol=1e-6)
  np.testing.assert_array_equal(result.lengths, [4, 4])
  np.testing.assert_allclose(result.mean, -3.0, rtol=1e-6)


def test_on_policy_loop_collects_rollouts_and_counts_episodes():
  env = Integrator(num_envs=3, length=4)
  recipe = _constant_recipe(-1.0, on_policy=True, rollout_length=2)
  init, run = loops.make_compiled_loop(recipe, env, iterations=4)
  state = init(jax.random.PRNGKey(0))
  state, out = run(state)
  # 4 iterations x 2 steps = 8 steps per env = 2 whole episodes per env.
  assert int(state.agent['updates']) == 4
  assert int(out.updates) == 4
  assert int(out.stats.completed) == 6
  np.testing.assert_allclose(out.stats.completed_return / 6, -3.0, rtol=1e-5)
  np.testing.assert_allclose(out.metrics['loss'], 1.5)
  # The last rollout (steps 7-8 of the second episodes) rewards: -0.7, -0.6.
  np.testing.assert_allclose(state.agent['seen'], 3 * (-0.7 - 0.6), rtol=1e-5)
  # A second call clears the per-call counters but keeps episodes running.
  state, out = run(state)
  assert int(out.stats.completed) == 6
  assert int(state.iteration) == 8


def test_off_policy_loop_warms_up_then_learns():
  env = Integrator(num_envs=2, length=4)
  recipe = _constant_recipe(
      0.5, on_policy=False,
      replay=ReplaySpec(capacity=64, batch_size=4, n_step=1, discount=0.9),
      steps_per_iteration=2, updates_per_iteration=3, warmup_steps=8)
  init, run = loops.make_compiled_loop(recipe, env, iterations=3)
  state = init(jax.random.PRNGKey(0))
  state, out = run(state)
  # Iterations collect 4 env steps each: 4, 8, 12. Learning starts once the
  # warm-up (8 steps) is complete, i.e. in iterations 2 and 3.
  assert int(out.updates) == 2
  assert int(state.agent['updates']) == 2 * 3
  np.testing.assert_allclose(out.metrics['loss'], 1.5)


def test_loop_rejects_malformed_recipes():
  env = Integrator(num_envs=3)
  with pytest.raises(ValueError, match='rollout_length'):
    loops.make_compiled_loop(_constant_recipe(0.0, on_policy=True), env)
  with pytest.raises(ValueError, match='ReplaySpec'):
    loops.make_compiled_loop(_constant_recipe(0.0, on_policy=False), env)
