"""The README's new-agent example builds, trains in the compiled loop, improves."""

import importlib.util
import os

import jax
import numpy as np

from roxie import envs, loops
from roxie.types import Transition

_EXAMPLES = os.path.join(os.path.dirname(__file__), '..', 'examples')


def _load(name='new_agent'):
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(_EXAMPLES, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_new_agent_example_runs_in_the_compiled_loop():
  module = _load()
  env = envs.make('PendulumSwingup', num_envs=2, episode_length=20)
  recipe = module.make(env.spec)._replace(warmup_steps=40)
  init, run = loops.make_compiled_loop(recipe, env, iterations=40)
  state = init(jax.random.PRNGKey(0))
  before = [np.asarray(x) for x in jax.tree.leaves(state.agent["params"])]
  state, out = run(state)
  assert int(out.updates) > 0
  assert np.isfinite(float(out.metrics['loss']))
  after = jax.tree.leaves(state.agent['params'])
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  assert int(out.stats.completed) == 2 * 40 // 20  # 2 envs x 40 steps


def test_new_agent_example_policy_matches_its_act():
  from roxie import export  # pylint: disable=g-import-not-at-top
  module = _load()
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  recipe = module.make(spec)
  state = recipe.init(jax.random.PRNGKey(0), spec)
  # Export reads the recipe's own policy.
  policy = export.policy_hooks('twin_ddpg', module, recipe, None, spec)
  assert policy is recipe.policy
  obs = np.random.default_rng(0).normal(size=(3, spec.obs_size))
  expected, _ = recipe.act(state, obs, jax.random.PRNGKey(1), explore=False)
  got = policy.apply(policy.params(state), obs)
  np.testing.assert_allclose(got, expected, atol=1e-6)
  assert list(policy.params(state)) == ['actor']


def test_redq_example_trains_in_the_compiled_loop_with_its_ensemble():
  redq = _load('redq')
  env = envs.make('PendulumSwingup', num_envs=2, episode_length=20)
  config = redq.Config(num_critics=4, subset_size=2, hidden_sizes=(16,),
                       batch_size=8, warmup_steps=16, updates_per_iteration=2)
  recipe = redq.make(config, env.spec)
  init, run = loops.make_compiled_loop(recipe, env, iterations=20)
  state = init(jax.random.PRNGKey(0))
  # Four critics, each with its own parameters.
  leaves = jax.tree.leaves(state.agent.critic)
  assert all(leaf.shape[0] == 4 for leaf in leaves)
  assert any(not np.allclose(leaf[0], leaf[1]) for leaf in leaves)
  before = jax.tree.map(np.asarray, state.agent)
  state, out = run(state)
  assert int(out.updates) > 0
  assert np.isfinite(float(out.metrics['critic_loss']))
  for name in ('actor', 'critic', 'target_critic'):
    assert any(not np.allclose(a, b) for a, b in zip(
        jax.tree.leaves(getattr(before, name)),
        jax.tree.leaves(getattr(state.agent, name)))), name


def test_redq_example_target_is_the_minimum_of_a_random_subset():
  # Target critic k outputs the constant k + 1, so each update's target is
  # r + discount * (the smallest index drawn + 1): with 2 of 4 drawn, the
  # minimum is 1 with probability 1/2, 2 with 1/3 and 3 with 1/6, never 4.
  redq = _load('redq')
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  config = redq.Config(num_critics=4, subset_size=2, hidden_sizes=(8,),
                       batch_size=8)
  recipe = redq.make(config, spec)
  state = recipe.init(jax.random.PRNGKey(0), spec)
  head = [k for k in state.target_critic if k.endswith('/~/head')][0]
  target_critic = dict(state.target_critic)
  target_critic[head] = {'w': np.zeros_like(target_critic[head]['w']),
                         'b': np.arange(1., 5.)[:, None]}
  state = state._replace(target_critic=target_critic)
  # Online critics that output 0 make the loss a function of the target.
  critic = dict(state.critic)
  critic = jax.tree.map(np.zeros_like, critic)
  state = state._replace(critic=critic)
  n = 8
  batch = Transition(
      obs=np.zeros((n, spec.obs_size), np.float32),
      action=np.zeros((n, spec.action_size), np.float32),
      reward=np.zeros(n, np.float32), discount=np.ones(n, np.float32),
      next_obs=np.zeros((n, spec.obs_size), np.float32))
  update = jax.jit(recipe.update)
  minima = []
  for i in range(60):
    _, metrics = update(state, batch, jax.random.PRNGKey(i))
    # loss = 0.5 * sum over 4 critics of (0 - m)^2 = 2 m^2.
    minima.append(float(np.sqrt(float(metrics['critic_loss']) / 2.)))
  np.testing.assert_allclose(minima, np.round(minima), atol=1e-4)
  counts = {m: int(np.sum(np.round(minima) == m)) for m in (1., 2., 3., 4.)}
  assert counts[4.] == 0 and counts[1.] > counts[3.] > 0, counts
