"""`check_recipe` checks a recipe's exported policy against its own act.

The probe recipe acts a = tanh(w x) on the 1-D integrator with w = 0.5
(explore=False); its policy takes `{'w': w}` from the state and applies the
same formula, so every disagreement below is one written on purpose.
"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from roxie import agents
from roxie import envs
from roxie import loops
from roxie.types import Policy, Recipe, ReplaySpec
from toy_envs import FixedStartIntegrator as Integrator  # pylint: disable=g-bad-import-order


def _probe(policy):
  def init(key, spec):
    del key, spec
    return {'w': jnp.float32(0.5), 'steps': jnp.zeros((), jnp.int32)}

  def act(state, obs, key, *, explore):
    a = jnp.tanh(state['w'] * obs)
    if explore:
      a = jnp.clip(a + 0.1 * jax.random.normal(key, a.shape), -1., 1.)
    return a, {}

  def update(state, data, key):
    del data, key
    return dict(state, steps=state['steps'] + 1), {}

  return Recipe(name='probe', config=None, init=init, act=act, update=update,
                on_policy=False,
                replay=ReplaySpec(capacity=16, batch_size=4, n_step=1,
                                  discount=0.9),
                policy=policy)


_PARAMS = lambda state: {'w': state['w']}
_APPLY = lambda params, obs: jnp.tanh(params['w'] * obs)


@pytest.mark.parametrize('eager', [False, True], ids=['jit', 'eager'])
def test_a_policy_that_acts_like_act_passes(eager):
  loops.check_recipe(_probe(Policy(params=_PARAMS, apply=_APPLY)),
                     Integrator().spec, eager=eager)
  loops.check_recipe(_probe(None), Integrator().spec)  # None: nothing to check.


@pytest.mark.parametrize('apply, message', [
    # Forgets the weight: tanh(x) vs tanh(x / 2) on N(0, 9) observations.
    (lambda p, o: jnp.tanh(o),
     r'probe: the exported policy, policy.apply\(policy.params\(agent_state\)'
     r', obs\), differs from act\(agent_state, obs, key, explore=False\) by '
     r'up to 0\.\d+ \(tolerance 1e-05\) on random observations; e\.g\. '
     r'observation \d: policy \[-?0\.\d+\], act \[-?0\.\d+\]'),
    # Within float tolerance is the same action.
    (lambda p, o: _APPLY(p, o) + 1e-4, r'by up to (0\.0001|9\.9\de-05) '),
    (lambda p, o: _APPLY(p, o)[:, 0], r'policy.apply gave actions of shape '
                                      r'\(8,\), but act\(explore=False\) '
                                      r'gives \(8, 1\)'),
    (lambda p, o: p['v'], r"policy.apply\(params, obs \[8, \.\.\.\]\) failed: "
                          r"KeyError: 'v'"),
])
def test_a_policy_that_acts_otherwise_is_refused(apply, message):
  with pytest.raises(loops.RecipeError, match=message):
    loops.check_recipe(_probe(Policy(params=_PARAMS, apply=apply)),
                       Integrator().spec)


def test_policy_params_must_be_a_dict_and_policy_a_policy():
  spec = Integrator().spec
  with pytest.raises(loops.RecipeError, match=r'policy.params\(agent_state\) '
                     'must return a dict of arrays'):
    loops.check_recipe(_probe(Policy(params=lambda s: s['w'], apply=_APPLY)),
                       spec)
  with pytest.raises(loops.RecipeError, match='must be a roxie.types.Policy'):
    loops.check_recipe(_probe((_PARAMS, _APPLY)), spec)


def test_the_tolerance_admits_float_rounding():
  # 1e-6 off (float32 noise of the same network in two programs) passes.
  loops.check_recipe(
      _probe(Policy(params=_PARAMS, apply=lambda p, o: _APPLY(p, o) + 1e-6)),
      Integrator().spec)


@pytest.mark.parametrize('agent', agents.AGENTS)
def test_every_recipe_passes_check_recipe_with_its_policy(agent):
  module = agents.get_agent(agent)
  fields = module.Config.__dataclass_fields__
  tiny = {k: v for k, v in dict(hidden_sizes=(8,), batch_size=4, num_envs=2,
                                rollout_length=4, num_minibatches=1,
                                num_epochs=1).items() if k in fields}
  cfg = dataclasses.replace(module.Config(), **tiny)
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  recipe = module.make(cfg, spec)
  assert isinstance(recipe.policy, Policy)
  loops.check_recipe(recipe, spec)
  # And a broken one of the same recipe is refused: the check can fail.
  halved = recipe.policy._replace(
      apply=lambda p, o: 0.5 * recipe.policy.apply(p, o))
  with pytest.raises(loops.RecipeError, match='differs from act'):
    loops.check_policy(recipe._replace(policy=halved), spec)
