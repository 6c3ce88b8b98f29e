"""Per-member hyperparameters: member k is the single run with its own values.

`make_population_loop(recipe, env, population=P, hparams={field: values},
make=module.make)` rebuilds the recipe inside the vmapped program with the
swept float fields as traced per-member arrays. Member k must then compute
what the single run `make(Config(field=values[k]), spec)` with seed k
computes; structural fields, wrong counts and recipes that read a swept
field as a Python number are refused with a message naming the field.
"""

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import agents
from roxie import envs
from roxie import loops
from roxie.loops import population as population_lib
from roxie.types import EnvSpec, Recipe, ReplaySpec

from toy_envs import RandomStartIntegrator  # pylint: disable=g-bad-import-order

SEEDS = (3, 5)


def _tiny_config(name: str):
  module = agents.get_agent(name)
  if name == 'ppo':
    return module, module.Config(rollout_length=8, num_epochs=2,
                                 num_minibatches=2, hidden_sizes=(16,))
  return module, module.Config(hidden_sizes=(16, 16), layer_norm=False,
                               batch_size=16, warmup_steps=16,
                               replay_capacity=400, updates_per_iteration=2)


def _max_diff(a, b) -> float:
  pairs = [(np.asarray(x, np.float64), np.asarray(y, np.float64))
           for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))]
  return max(float(np.max(np.abs(x - y), initial=0.0)) for x, y in pairs)


def _check_members_follow_single_runs(module, config, env, hparams, calls,
                                      iterations, atol):
  """Runs the population and every member's single run; compares them.

  Returns:
    The population's final state (host arrays) and its last output.
  """
  recipe = module.make(config, env.spec)
  init, run = loops.make_population_loop(
      recipe, env, population=len(SEEDS), iterations=iterations,
      hparams=hparams, make=module.make)
  state = init(loops.population_keys(SEEDS))
  for _ in range(calls):
    state, out = run(state)
  state = jax.device_get(state)
  for k, seed in enumerate(SEEDS):
    mine = population_lib.member_config(config, hparams, k)
    for field, values in hparams.items():
      assert getattr(mine, field) == values[k]
    init1, run1 = loops.make_compiled_loop(module.make(mine, env.spec), env,
                                           iterations=iterations)
    single = init1(jax.random.PRNGKey(seed))
    for _ in range(calls):
      single, out1 = run1(single)
    single = jax.device_get(single)
    member = loops.member(state, k)
    # Not bit for bit: XLA:CPU lowers the members' batched products with
    # other loop orders than the single run's (an ulp per update, as for
    # seeds alone), and a swept value is an f32 array where the single run
    # folds a Python float (e.g. 1 - tau is rounded once in float64 there,
    # computed in float32 here).
    diff = _max_diff(member.agent, single.agent)
    assert diff < atol, (k, diff)
    np.testing.assert_array_equal(member.key, single.key)
    assert int(out.updates[k]) == int(out1.updates)
    for name in out1.metrics:
      # MPO's Lagrange multipliers (exp of a log dual stepped by Adam) get
      # 1e-3: where a dual's gradient is near zero, Adam's normalised step
      # turns an ulp of difference into a step of up to dual_lr, so
      # alpha_std drifted 1.8e-4 apart in 3 calls (run alone; under xdist
      # the same test passed, the order of earlier compiles differing).
      duals = ('alpha_mean', 'alpha_std', 'temperature')
      rtol = 1e-3 if name in duals else 1e-4
      np.testing.assert_allclose(out.metrics[name][k], out1.metrics[name],
                                 rtol=rtol, atol=1e-5, err_msg=name)
  return state, out


def test_sac_members_follow_single_runs_with_their_lr_tau_discount():
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config('sac')
  hparams = {'critic_lr': (1e-3, 3e-3), 'tau': (0.005, 0.05),
             'discount': (0.99, 0.9)}
  # 60 x 2 iterations of 2 envs, learning from iteration 8 on (16 warm-up
  # steps): 113 x 2 = 226 updates per member.
  state, out = _check_members_follow_single_runs(
      module, config, env, hparams, calls=2, iterations=60, atol=1e-5)
  assert int(out.updates[0]) == 60
  # The values really differ in effect: the members' critics move apart far
  # more than the tolerance above.
  assert _max_diff(loops.member(state, 0).agent.critic,
                   loops.member(state, 1).agent.critic) > 1e-2


@pytest.mark.slow  # ~29 s; SAC's members (above) stay in the fast suite.
def test_ppo_members_follow_single_runs_with_their_entropy_and_clip():
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config('ppo')
  hparams = {'entropy_coef': (0.0, 0.05), 'clip_epsilon': (0.2, 0.1)}
  # 2 x 25 updates of 2 epochs x 2 minibatches: 200 gradient steps.
  state, out = _check_members_follow_single_runs(
      module, config, env, hparams, calls=2, iterations=25, atol=1e-5)
  assert int(out.updates[1]) == 25
  assert _max_diff(loops.member(state, 0).agent.actor,
                   loops.member(state, 1).agent.actor) > 1e-3


@pytest.mark.slow  # ~1-2 min on 2 busy cores: three SAC programs, natively.
def test_native_sac_members_follow_single_runs_with_their_actor_lr():
  env = envs.make('PendulumSwingup', backend='cpu', num_envs=2,
                  episode_length=50, nthread=1)
  module, config = _tiny_config('sac')
  _check_members_follow_single_runs(
      module, config, env, {'actor_lr': (3e-4, 3e-3), 'init_alpha': (0.1, 1.)},
      calls=2, iterations=60, atol=1e-4)


def test_sweepable_fields_are_the_float_fields():
  from roxie.agents import d4pg, ppo, sac  # pylint: disable=g-import-not-at-top
  fields = population_lib.sweepable_fields(sac.Config())
  for name in ('critic_lr', 'actor_lr', 'alpha_lr', 'tau', 'discount',
               'init_alpha', 'max_grad_norm', 'target_entropy'):
    assert name in fields, name
  for name in ('batch_size', 'n_step', 'hidden_sizes', 'layer_norm',
               'encoder_pooling'):
    assert name not in fields, name
  assert {'v_min', 'v_max'} <= set(population_lib.sweepable_fields(
      d4pg.Config()))
  assert 'num_atoms' not in population_lib.sweepable_fields(d4pg.Config())
  assert {'entropy_coef', 'clip_epsilon', 'learning_rate', 'target_kl'} <= set(
      population_lib.sweepable_fields(ppo.Config()))
  assert 'log_std_range' not in population_lib.sweepable_fields(ppo.Config())


@pytest.mark.parametrize('field', ['batch_size', 'n_step', 'hidden_sizes',
                                   'layer_norm', 'warmup_steps'])
def test_structural_fields_are_refused_by_name(field):
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config('sac')
  recipe = module.make(config, env.spec)
  with pytest.raises(ValueError, match=rf'^{field} .*cannot differ per '
                     r'member.*critic_lr'):
    loops.make_population_loop(recipe, env, population=2,
                               hparams={field: (16, 32)}, make=module.make)


def test_bad_hparams_are_refused_with_the_field_named():
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config('sac')
  recipe = module.make(config, env.spec)

  def build(hparams, make=module.make, population=2):
    return loops.make_population_loop(recipe, env, population=population,
                                      hparams=hparams, make=make)

  with pytest.raises(ValueError, match='critic_lr: 3 values for a '
                     'population of 2'):
    build({'critic_lr': (1e-4, 3e-4, 1e-3)})
  with pytest.raises(ValueError, match='tau: 1 values for a population of 2'):
    build({'critic_lr': (1e-4, 3e-4), 'tau': (0.01,)})
  with pytest.raises(ValueError, match="no field 'critic_rate'.*critic_lr"):
    build({'critic_rate': (1e-4, 3e-4)})
  with pytest.raises(ValueError, match="tau: 'fast' is not a finite number"):
    build({'tau': (0.01, 'fast')})
  with pytest.raises(ValueError, match='tau: nan is not a finite number'):
    build({'tau': (0.01, float('nan'))})
  with pytest.raises(ValueError, match='tau: give a sequence'):
    build({'tau': 0.01})
  with pytest.raises(ValueError, match='hparams is empty'):
    build({})
  with pytest.raises(ValueError, match='need make'):
    build({'tau': (0.01, 0.02)}, make=None)
  # The members' configs are built on the host first, so a recipe's own
  # checks see each member's values (D4PG's support needs v_min < v_max).
  d4pg = agents.get_agent('d4pg')
  d_config = dataclasses.replace(_tiny_config('d4pg')[1], v_max=10.)
  with pytest.raises(ValueError, match='Need v_min < v_max'):
    loops.make_population_loop(d4pg.make(d_config, env.spec), env,
                               population=2, hparams={'v_min': (0., 20.)},
                               make=d4pg.make)


@dataclasses.dataclass(frozen=True)
class _ToyConfig:
  lr: float = 0.1
  gain: float = 1.0
  warmup_fraction: float = 0.5


def _toy_make(config: _ToyConfig, spec: EnvSpec,
              branch_on: Optional[str] = None) -> Recipe:
  """A recipe whose warm-up comes from a float field (structure)."""

  def init(key, env_spec):
    del env_spec
    w = config.gain * jax.random.normal(key, (spec.obs_size, spec.action_size))
    if branch_on is not None and getattr(config, branch_on) > 0.5:
      w = -w  # A Python branch on a float: cannot be traced per member.
    return {'w': w}

  def act(state, obs, key, *, explore):
    del key, explore
    return jnp.tanh(obs @ state['w']), {}

  def update(state, batch, key):
    del key
    grad = jnp.mean(batch.reward) * jnp.ones_like(state['w'])
    return {'w': state['w'] + config.lr * grad}, {}

  return Recipe(name='toy', config=config, init=init, act=act, update=update,
                on_policy=False,
                replay=ReplaySpec(capacity=40, batch_size=4, n_step=1,
                                  discount=0.9),
                warmup_steps=int(100 * config.warmup_fraction))


def test_fields_that_change_the_structure_or_are_read_in_python_are_refused():
  env = RandomStartIntegrator(num_envs=2, length=5)
  config = _ToyConfig()
  recipe = _toy_make(config, env.spec)
  # warm-up = 100 x warmup_fraction: the members would disagree on it.
  with pytest.raises(ValueError, match=r'disagree on warmup_steps \(50 .* 20 '
                     r'for member 1\).*warmup_fraction'):
    loops.make_population_loop(recipe, env, population=2, make=_toy_make,
                               hparams={'warmup_fraction': (0.5, 0.2)})
  # A Python branch on `gain` in init: refused when the program is traced.
  def branching(c, spec):
    return _toy_make(c, spec, branch_on='gain')
  init, _ = loops.make_population_loop(recipe, env, population=2,
                                       make=branching,
                                       hparams={'gain': (1., 2.)})
  with pytest.raises(ValueError, match='toy reads gain as a Python number'):
    jax.eval_shape(init, loops.population_keys(SEEDS))
  # The float fields it reads as arrays may differ: member k starts from
  # gain_k times the single run's weights.
  init, run = loops.make_population_loop(recipe, env, population=2,
                                         make=_toy_make,
                                         hparams={'gain': (1., 2.),
                                                  'lr': (0.1, 0.3)})
  state = init(loops.population_keys(SEEDS))
  for k, (seed, gain) in enumerate(zip(SEEDS, (1., 2.))):
    single = loops.make_compiled_loop(recipe, env)[0](
        jax.random.PRNGKey(seed))
    np.testing.assert_allclose(state.agent['w'][k],
                               gain * single.agent['w'], rtol=1e-6)
  state, out = run(state)
  assert out.updates.shape == (2,)


# Fields that recipes once read as Python numbers (a switch `> 0`, the
# categorical support's order check and float() conversions): each raised a
# ConcretizationTypeError when traced per member.
@pytest.mark.parametrize('name, hparams', [
    ('ddpg', {'saturation_weight': (0., 0.1)}),
    ('d4pg', {'discount': (0.99, 0.9)}),
    ('td4', {'v_min': (-5., -1.), 'v_max': (120., 50.)}),
    ('mpo', {'action_penalty_epsilon': (0., 1e-3)}),
])
def test_fields_once_read_in_python_now_trace_per_member(name, hparams):
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config(name)
  if name == 'mpo':
    config = dataclasses.replace(config, num_samples=2)
  init, run = loops.make_population_loop(
      module.make(config, env.spec), env, population=2, hparams=hparams,
      make=module.make)
  state = jax.eval_shape(init, loops.population_keys(SEEDS))
  _, out = jax.eval_shape(run, state)
  assert out.updates.shape == (2,)


@pytest.mark.slow  # ~1-2 min on 2 busy cores: three programs each.
@pytest.mark.parametrize('name, hparams', [
    # Member 0 has the penalty off (0): it must match the single run whose
    # Python branch leaves the penalty out.
    ('mpo', {'action_penalty_epsilon': (0., 1e-3), 'dual_lr': (1e-2, 3e-2)}),
    # The support [v_min, v_max] follows the discount (as f32 per member).
    ('d4pg', {'discount': (0.99, 0.9), 'noise_start': (0.4, 0.2)}),
    ('ddpg', {'saturation_weight': (0., 0.5), 'actor_lr': (3e-4, 1e-3)}),
])
def test_switch_like_fields_follow_single_runs(name, hparams):
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config(name)
  if name == 'mpo':
    config = dataclasses.replace(config, num_samples=4)
  _check_members_follow_single_runs(module, config, env, hparams, calls=2,
                                    iterations=40, atol=1e-4)


# The table of roxie/loops/population.py's docstring (docs/SCALE.md too):
# every float field of each recipe (its pixels settings are not swept).
SUPPORTED = {
    'ddpg': ('discount', 'tau', 'actor_lr', 'critic_lr', 'max_grad_norm',
             'noise_start', 'noise_end', 'saturation_weight',
             'saturation_threshold', 'obs_clip'),
    'td3': ('discount', 'tau', 'actor_lr', 'critic_lr', 'max_grad_norm',
            'noise_start', 'noise_end', 'target_noise', 'target_noise_clip',
            'obs_clip'),
    'd4pg': ('discount', 'tau', 'actor_lr', 'critic_lr', 'max_grad_norm',
             'noise_start', 'noise_end', 'v_min', 'v_max',
             'critic_init_value', 'obs_clip'),
    'td4': ('discount', 'tau', 'actor_lr', 'critic_lr', 'max_grad_norm',
            'noise_start', 'noise_end', 'target_noise', 'target_noise_clip',
            'v_min', 'v_max', 'critic_init_value', 'obs_clip'),
    'sac': ('discount', 'tau', 'actor_lr', 'critic_lr', 'alpha_lr',
            'max_grad_norm', 'init_alpha', 'target_entropy', 'obs_clip'),
    'mpo': ('discount', 'tau', 'policy_lr', 'critic_lr', 'dual_lr',
            'max_grad_norm', 'epsilon', 'epsilon_mean', 'epsilon_std',
            'init_temperature', 'init_alpha_mean', 'init_alpha_std',
            'action_penalty_epsilon', 'obs_clip'),
    'ppo': ('discount', 'gae_lambda', 'clip_epsilon', 'value_clip_epsilon',
            'entropy_coef', 'learning_rate', 'target_kl', 'max_grad_norm',
            'init_log_std', 'obs_clip'),
}


def test_the_documented_table_lists_every_float_field():
  for name, fields in SUPPORTED.items():
    swept = set(population_lib.sweepable_fields(
        agents.get_agent(name).Config()))
    assert swept == set(fields), (name, swept ^ set(fields))


def _two_values(config, field):
  """Two valid, different values of `field` (None-able ones get numbers)."""
  special = {'v_min': (-5., -4.), 'v_max': (120., 100.),
             'target_entropy': (-1., -0.5), 'discount': (0.99, 0.9),
             'init_log_std': (-0.5, -1.)}
  if field in special:
    return special[field]
  value = getattr(config, field)
  return (value, 0.5 * value) if value else (0.1, 0.2)


@pytest.mark.slow  # ~2 min on 2 busy cores: traces (no compiles) ~70 programs.
@pytest.mark.parametrize('name', sorted(SUPPORTED))
def test_every_documented_field_traces_per_member(name):
  env = RandomStartIntegrator(num_envs=2, length=5)
  module, config = _tiny_config(name)
  if name == 'mpo':
    config = dataclasses.replace(config, num_samples=2)
  recipe = module.make(config, env.spec)
  for field in SUPPORTED[name]:
    init, run = loops.make_population_loop(
        recipe, env, population=2, make=module.make,
        hparams={field: _two_values(config, field)})
    _, out = jax.eval_shape(run, jax.eval_shape(
        init, loops.population_keys(SEEDS)))
    assert out.updates.shape == (2,), field


def test_population_grid_is_the_cross_product_seeds_innermost():
  seeds, hparams = loops.population_grid(
      (0, 1), {'tau': (0.01, 0.02), 'critic_lr': (1e-4, 3e-4, 1e-3)})
  assert seeds == (0, 1) * 6
  assert hparams['tau'] == (0.01,) * 6 + (0.02,) * 6
  assert hparams['critic_lr'] == (1e-4, 1e-4, 3e-4, 3e-4, 1e-3, 1e-3) * 2
  assert loops.population_grid((5, 7, 9), {}) == ((5, 7, 9), {})
  with pytest.raises(ValueError, match='tau: the sweep gives it no values'):
    loops.population_grid((0,), {'tau': ()})
  with pytest.raises(ValueError, match='at least one seed'):
    loops.population_grid((), {'tau': (0.01,)})
