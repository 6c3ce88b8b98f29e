"""The loop's pieces alone: iteration builders, `check_recipe`, host physics.

The pure-JAX env is the 1-D integrator of test_compiled_loop.py: obs = [x],
x' = x + 0.1 * a, reward = -|x'|, truncation after `length` steps, reset to
x = 1; every number below follows by hand.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import loops
from roxie.loops import iteration
from roxie.loops import placement
from roxie.types import Recipe, ReplaySpec
from toy_envs import FixedStartIntegrator as Integrator  # pylint: disable=g-bad-import-order


def _recipe(*, on_policy, action=-1.0, **kw):
  """Acts `action`; update counts its calls and keeps the data's reward sum."""

  def init(key, spec):
    del key, spec
    return {'updates': jnp.zeros((), jnp.int32), 'seen': jnp.zeros(())}

  def act(state, obs, key, *, explore):
    del state, key, explore
    return jnp.full((obs.shape[0], 1), action), {'x': obs[:, 0]}

  def update(state, data, key):
    del key
    return ({'updates': state['updates'] + 1, 'seen': jnp.sum(data.reward)},
            {'loss': jnp.float32(2.0)})

  return Recipe(name='probe', config=None, init=init, act=act, update=update,
                on_policy=on_policy, **kw)


def _off_policy(**kw):
  settings = dict(replay=ReplaySpec(capacity=64, batch_size=4, n_step=1,
                                    discount=0.9),
                  steps_per_iteration=2, updates_per_iteration=3,
                  warmup_steps=8)
  settings.update(kw)
  return _recipe(on_policy=False, action=0.5, **settings)


def test_off_policy_iteration_alone_warms_up_then_runs_its_update_burst():
  env = Integrator()
  recipe = _off_policy()
  place = placement.OneDevice(env)
  init = jax.jit(iteration.make_init(recipe, env.spec, env.num_envs, place))
  step = jax.jit(iteration.off_policy_iteration(recipe, env.spec,
                                                env.num_envs, place))
  state = init(jax.random.PRNGKey(0))
  key = jax.random.PRNGKey(1)
  # Iteration 0: 2 steps x 2 envs = 4 < warm-up 8: no update, zero metrics.
  state, (metrics, learned) = step(state, key)
  assert not bool(learned)
  assert int(state.agent['updates']) == 0
  np.testing.assert_array_equal(metrics['loss'], 0.0)
  assert int(state.iteration) == 1
  # Iteration 1 completes the warm-up (8 steps): one burst of 3 updates.
  state, (metrics, learned) = step(state, key)
  assert bool(learned)
  assert int(state.agent['updates']) == 3
  np.testing.assert_allclose(metrics['loss'], 2.0)
  # Warm-up actions are uniform, so only the episode bookkeeping is exact:
  # 4 steps of 2 envs with length 4 close one episode per env.
  assert int(state.stats.completed) == 2
  np.testing.assert_array_equal(state.env.t, [0, 0])


def test_off_policy_iteration_without_updates_never_learns():
  env = Integrator()
  recipe = _off_policy(updates_per_iteration=0, warmup_steps=0)
  place = placement.OneDevice(env)
  init = iteration.make_init(recipe, env.spec, env.num_envs, place)
  step = jax.jit(iteration.off_policy_iteration(recipe, env.spec,
                                                env.num_envs, place))
  state = init(jax.random.PRNGKey(0))
  for _ in range(3):
    state, (_, learned) = step(state, jax.random.PRNGKey(2))
    assert not bool(learned)
  assert int(state.agent['updates']) == 0


def test_on_policy_iteration_alone_updates_once_on_its_rollout():
  env = Integrator(num_envs=3, length=4)
  recipe = _recipe(on_policy=True, rollout_length=3)
  place = placement.OneDevice(env)
  init = iteration.make_init(recipe, env.spec, env.num_envs, place)
  step = jax.jit(iteration.on_policy_iteration(recipe, env.spec,
                                               env.num_envs, place))
  state, (metrics, learned) = step(init(jax.random.PRNGKey(0)),
                                   jax.random.PRNGKey(1))
  assert bool(learned) and int(state.agent['updates']) == 1
  # x: 0.9, 0.8, 0.7 in every env: the rollout's rewards sum to -3 * 2.4.
  np.testing.assert_allclose(state.agent['seen'], -7.2, rtol=1e-6)
  np.testing.assert_allclose(state.env.obs[:, 0], [0.7] * 3, rtol=1e-6)
  np.testing.assert_allclose(metrics['loss'], 2.0)
  assert state.replay == ()


def test_make_run_averages_metrics_over_the_iterations_that_learned():
  env = Integrator()
  recipe = _off_policy()
  place = placement.OneDevice(env)
  init = iteration.make_init(recipe, env.spec, env.num_envs, place)
  calls = []

  def fake_iteration(state, key):
    del key
    learned = state.iteration % 2 == 1  # Iterations 1 and 3 of 4.
    calls.append(1)
    loss = jnp.where(learned, state.iteration.astype(jnp.float32), 0.0)
    return (state._replace(iteration=state.iteration + 1),
            ({'loss': loss}, learned))

  run = jax.jit(iteration.make_run(fake_iteration, 4, place))
  state, out = run(init(jax.random.PRNGKey(0)))
  assert int(out.updates) == 2  # Iterations that learned, not update calls.
  np.testing.assert_allclose(out.metrics['loss'], (1.0 + 3.0) / 2)
  assert int(state.iteration) == 4


# -- check_recipe ---------------------------------------------------------------


def _broken(where):
  """A working off-policy recipe with one deliberate mistake at `where`."""
  good = _off_policy()

  def init(key, spec):
    state = good.init(key, spec)
    if where == 'init':
      return state['no such entry']
    return state

  def act(state, obs, key, *, explore):
    action, extras = good.act(state, obs, key, explore=explore)
    if where == 'act':  # One action for the whole batch.
      return action[0], extras
    return action, extras

  def update(state, data, key):
    new, metrics = good.update(state, data, key)
    if where == 'update':  # Mixes up obs [N, 1] and reward [N].
      new = dict(new, seen=jnp.sum(data.obs @ data.reward))
    if where == 'carry':  # The loop's scan would reject this carry.
      new = dict(new, seen=jnp.zeros((2,)))
    return new, metrics

  return good._replace(init=init, act=act, update=update)


@pytest.mark.parametrize('eager', [False, True], ids=['abstract', 'eager'])
@pytest.mark.parametrize('where, message', [
    ('init', r'probe: init\(key, env_spec\) failed: KeyError'),
    ('act', r'probe: act returned an action of shape \(1,\), expected '
            r'\(2, 1\)'),
    ('update', r'probe: update\(agent_state, Transition \[4\], key\) '
               r'failed: TypeError'),
    ('carry', r"agent state leaf \['seen'\] from \(\) float32 to \(2,\) "
              r'float32'),
])
def test_check_recipe_names_the_function_that_failed(where, message, eager):
  spec = Integrator().spec
  loops.check_recipe(_off_policy(), spec, eager=eager)  # The good one passes.
  with pytest.raises(loops.RecipeError, match=message) as info:
    loops.check_recipe(_broken(where), spec, num_envs=2, eager=eager)
  if where in ('init', 'update'):  # The original error stays attached.
    assert info.value.__cause__ is not None


def test_check_recipe_checks_on_policy_rollouts_and_settings():
  spec = Integrator().spec
  loops.check_recipe(_recipe(on_policy=True, rollout_length=3), spec)
  with pytest.raises(ValueError, match='rollout_length'):
    loops.check_recipe(_recipe(on_policy=True), spec)


# -- host physics: an evaluator never drives the training env's simulations -----


def test_evaluator_refuses_the_native_training_env_before_compiling():
  from roxie import envs  # pylint: disable=g-import-not-at-top
  env = envs.make('PendulumSwingup', backend='cpu', num_envs=2,
                  episode_length=10, nthread=1)
  recipe = _recipe(on_policy=True, rollout_length=2)
  loops.make_compiled_loop(recipe, env)
  # Before the fix the evaluator ran, and the next training call died inside
  # XLA with an INTERNAL error (StaleStateError in its last line).
  with pytest.raises(loops.HostPhysicsInUse, match='separate env'):
    loops.make_evaluator(recipe, env)
  # The other way round too, and through a wrapper of the same physics.
  eval_env = envs.make('PendulumSwingup', backend='cpu', num_envs=2,
                       episode_length=10, nthread=1, action_repeat=2)
  loops.make_evaluator(recipe, eval_env)
  with pytest.raises(loops.HostPhysicsInUse, match='evaluation'):
    loops.make_compiled_loop(recipe, eval_env.env)
  # Pure-JAX envs keep no host state: one env may serve both.
  plain = Integrator()
  loops.make_compiled_loop(recipe, plain)
  loops.make_evaluator(recipe, plain)
