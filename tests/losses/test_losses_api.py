"""Tests for the flat public API of roxie.losses."""

import functools
import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import losses


def test_all_names_exist_and_are_public_definitions():
  assert len(set(losses.__all__)) == len(losses.__all__)
  for name in losses.__all__:
    assert hasattr(losses, name), name
  defined = {n for n, v in vars(losses).items()
             if not n.startswith('_') and
             (inspect.isfunction(v) or inspect.isclass(v))}
  assert defined == set(losses.__all__)


def test_hyperparameters_are_keyword_only():
  # Hyperparameters come after `*` so call sites name them.
  for fn, names in [
      (losses.n_step_returns, ['n', 'stop_target_gradients']),
      (losses.gae_advantages, ['lambda_']),
      (losses.mpo_m_step, ['epsilon_mean', 'epsilon_std', 'per_dimension']),
      (losses.sac_temperature_loss, ['target_entropy']),
      (losses.twin_categorical_target, ['atoms', 'blend']),
      (losses.categorical_mean, ['atoms', 'from_logits']),
      (losses.categorical_td_target, ['atoms', 'stop_target_gradients']),
      (losses.categorical_td_loss, ['atoms', 'stop_target_gradients']),
      (losses.clipped_double_q, ['weight']),
      (losses.ensemble_min_q, ['subset_size', 'key']),
      (losses.ensemble_q_target, ['subset_size', 'key',
                                  'stop_target_gradients']),
      (losses.dpg_loss, ['dqda_clipping']),
      (losses.ppo_value_loss, ['clip_epsilon']),
  ]:
    params = inspect.signature(fn).parameters
    for name in names:
      assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn, name)


def test_n_step_output_fields_match_the_replay_contract():
  assert losses.NStepOutput._fields == ('reward', 'discount', 'last')
  params = list(inspect.signature(losses.n_step_transition).parameters)
  assert params == ['r_t', 'discount_t', 'end_t']


# Every public function, batched with jit(vmap), equals its per-example calls.
_K, _A, _N, _T = 5, 2, 4, 6


def _f(rng, *shape):
  return jnp.asarray(rng.normal(size=shape).astype(np.float32))


def _pos(rng, *shape):
  return jnp.asarray(rng.uniform(.3, 1.5, size=shape).astype(np.float32))


def _disc(rng, *shape):
  return jnp.asarray(rng.uniform(0., 1., size=shape).astype(np.float32))


def _end(rng, *shape):
  return jnp.asarray(rng.random(shape) < .3)


def _probs(rng):
  return jax.nn.softmax(_f(rng, _K))


_ATOMS = jnp.linspace(-1., 1., _K)

_CASES = {
    'td_target': (losses.td_target, lambda g: (_f(g), _disc(g), _f(g))),
    'clipped_double_q': (functools.partial(losses.clipped_double_q, weight=.7),
                         lambda g: (_f(g, 3), _f(g, 3))),
    'twin_q_target': (losses.twin_q_target,
                      lambda g: (_f(g), _disc(g), _f(g), _f(g))),
    'ensemble_min_q': (losses.ensemble_min_q, lambda g: (_f(g, 3),)),
    'ensemble_q_target': (losses.ensemble_q_target,
                          lambda g: (_f(g), _disc(g), _f(g, 3))),
    'n_step_transition': (losses.n_step_transition,
                          lambda g: (_f(g, 3), _disc(g, 3), _end(g, 3))),
    'n_step_returns': (functools.partial(losses.n_step_returns, n=3),
                       lambda g: (_f(g, _T), _disc(g, _T), _end(g, _T),
                                  _f(g, _T))),
    'lambda_returns': (functools.partial(losses.lambda_returns, lambda_=.8),
                       lambda g: (_f(g, _T), _disc(g, _T), _end(g, _T),
                                  _f(g, _T))),
    'categorical_mean': (functools.partial(losses.categorical_mean,
                                           atoms=_ATOMS),
                         lambda g: (_f(g, _K),)),
    'categorical_td_target': (functools.partial(losses.categorical_td_target,
                                                atoms=_ATOMS),
                              lambda g: (_f(g), _disc(g), _probs(g))),
    'categorical_td_loss': (functools.partial(losses.categorical_td_loss,
                                              atoms=_ATOMS),
                            lambda g: (_f(g, _K), _f(g), _disc(g),
                                       _probs(g))),
    'twin_categorical_target': (
        functools.partial(losses.twin_categorical_target, atoms=_ATOMS,
                          blend=.2),
        lambda g: (_f(g, _K), _f(g, _K))),
    'dpg_loss': (functools.partial(losses.dpg_loss, dqda_clipping=1.),
                 lambda g: (_f(g, _A), _f(g, _A))),
    'dpg_actor_loss': (losses.dpg_actor_loss,
                       lambda g: (_f(g), 3. * _f(g, _A))),
    'saturation_penalty': (losses.saturation_penalty,
                           lambda g: (3. * _f(g, _A),)),
    'sac_critic_target': (functools.partial(losses.sac_critic_target,
                                            alpha=.2),
                          lambda g: (_f(g), _disc(g), _f(g), _f(g))),
    'sac_actor_loss': (functools.partial(losses.sac_actor_loss, alpha=.2),
                       lambda g: (_f(g), _f(g))),
    'sac_temperature_loss': (
        functools.partial(losses.sac_temperature_loss, target_entropy=-2.),
        lambda g: (_f(g), _f(g))),
    'gaussian_log_prob': (losses.gaussian_log_prob,
                          lambda g: (_f(g, _A), _f(g, _A), _pos(g, _A))),
    'gaussian_entropy': (losses.gaussian_entropy, lambda g: (_pos(g, _A),)),
    'gaussian_kl': (losses.gaussian_kl,
                    lambda g: (_f(g, _A), _pos(g, _A), _f(g, _A),
                               _pos(g, _A))),
    'mpo_e_step': (losses.mpo_e_step, lambda g: (_f(g, _N), _f(g))),
    'mpo_m_step': (losses.mpo_m_step,
                   lambda g: (_f(g, _A), _pos(g, _A), _f(g, _A), _pos(g, _A),
                              _f(g, _N, _A), jax.nn.softmax(_f(g, _N)),
                              _f(g), _f(g))),
    'gaussian_mpo_loss': (
        functools.partial(losses.gaussian_mpo_loss, per_dimension=True),
        lambda g: (_f(g, _N), _f(g, _N, _A), _f(g, _A), _pos(g, _A),
                   _f(g, _A), _pos(g, _A), _f(g), _f(g, _A), _f(g, _A))),
    'ppo_policy_loss': (losses.ppo_policy_loss,
                        lambda g: (.1 * _f(g, _T), .1 * _f(g, _T),
                                   _f(g, _T))),
    'ppo_value_loss': (functools.partial(losses.ppo_value_loss,
                                         clip_epsilon=.2),
                       lambda g: (_f(g, _T), _f(g, _T), _f(g, _T))),
    'gae_advantages': (losses.gae_advantages,
                       lambda g: (_f(g, _T), _disc(g, _T), _end(g, _T),
                                  _f(g, _T), _f(g, _T))),
}


def test_every_public_function_has_a_batching_case():
  functions = {n for n in losses.__all__
               if inspect.isfunction(getattr(losses, n))}
  assert functions == set(_CASES)


@pytest.mark.parametrize('name', sorted(_CASES))
def test_jit_vmap_equals_per_example_calls(name):
  fn, make = _CASES[name]
  rng = np.random.default_rng(0)
  examples = [make(rng) for _ in range(2)]
  batch = jax.tree.map(lambda *x: jnp.stack(x), *examples)
  batched = jax.jit(jax.vmap(fn))(*batch)
  for i, example in enumerate(examples):
    single = fn(*example)
    jax.tree.map(
        lambda b, s: np.testing.assert_allclose(b[i], s, rtol=1e-5, atol=1e-6),
        batched, single)


def test_import_pulls_in_neither_rlax_nor_distrax_nor_tfp():
  # rlax imports distrax, which imports TensorFlow Probability's JAX substrate
  # (~1,600 modules, most of a second); roxie.losses needs none of it. Checked
  # in a fresh interpreter: this test process has imported rlax already. The
  # prefix 'tensorflow' covers tensorflow_probability.
  code = (
      'import sys; import roxie.losses; '
      'heavy = sorted({m.split(".")[0] for m in sys.modules if m.startswith('
      '("rlax", "distrax", "tensorflow"))}); '
      'print(",".join(heavy))')
  out = subprocess.run([sys.executable, '-c', code], check=True,
                       capture_output=True, text=True, timeout=300)
  assert out.stdout.strip() == ''
