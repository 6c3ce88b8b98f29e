"""The README's new-agent example builds, trains in the compiled loop, improves."""

import importlib.util
import os

import jax
import numpy as np

from roxie import envs, loops

_PATH = os.path.join(os.path.dirname(__file__), '..', 'examples', 'new_agent.py')


def _load():
  spec = importlib.util.spec_from_file_location('new_agent', _PATH)
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


def test_new_agent_example_policy_hooks_match_its_act():
  from roxie import export  # pylint: disable=g-import-not-at-top
  module = _load()
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  recipe = module.make(spec)
  state = recipe.init(jax.random.PRNGKey(0), spec)
  policy_params, make_policy = export.policy_hooks('twin_ddpg', module)
  apply = make_policy(None, spec)
  obs = np.random.default_rng(0).normal(size=(3, spec.obs_size))
  expected, _ = recipe.act(state, obs, jax.random.PRNGKey(1), explore=False)
  got = apply(policy_params(state), obs)
  np.testing.assert_allclose(got, expected, atol=1e-6)
  assert list(policy_params(state)) == ['actor']
