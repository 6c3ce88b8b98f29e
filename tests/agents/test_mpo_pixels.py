"""MPO from pixels (dict observations): the DrQ/SAC-AE arrangement.

The synthetic 16x16 pixel batches and spec are test_sac_pixels'; the CLI
smoke run renders CartpoleSwingup and skips where no headless OpenGL works.
"""

import dataclasses
import json

import haiku as hk
import jax
from jax.extend import core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import cli
from roxie import config as config_lib
from roxie import export
from roxie import networks
from roxie.agents import mpo
from test_sac_pixels import SPEC, _batch  # pylint: disable=g-bad-import-order

CFG = mpo.Config(hidden_sizes=(16, 16), batch_size=8, num_samples=4,
                 pixels=networks.PixelConfig(encoder_channels=(8, 8),
                                             encoder_strides=(2, 2),
                                             encoder_feature_size=8),
                 replay_capacity=400, warmup_steps=16,
                 updates_per_iteration=1)


def _leaf(params):
  return np.asarray(jax.tree.leaves(params)[0])


def _max_diff(a, b):
  return max(float(jnp.max(jnp.abs(x - y)))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_pixel_mpo_state_act_and_exported_policy_agree():
  recipe = mpo.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  assert set(state.critic) == {'encoder', 'q'}
  # The policy holds no conv: it reads the critic's encoder features.
  assert not any('conv' in k for k in state.policy)
  batch = _batch(jax.random.PRNGKey(1))
  a, _ = recipe.act(state, batch.obs, jax.random.PRNGKey(2), explore=True)
  assert a.shape == (8, 1) and np.all(np.abs(a) <= 1.)
  state, _ = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(3))
  mode, _ = recipe.act(state, batch.obs, jax.random.PRNGKey(4),
                       explore=False)
  params = mpo.policy_params(state)
  assert set(params) == {'policy', 'encoder'}
  policy = mpo.make_policy(CFG, SPEC)
  np.testing.assert_allclose(policy(params, batch.obs), mode, rtol=1e-5,
                             atol=1e-6)


def test_pixel_update_trains_the_encoder_by_the_critic_loss_only():
  recipe = mpo.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  batch = _batch(jax.random.PRNGKey(1))
  new, metrics = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values())
  assert _max_diff(state.critic['encoder'], new.critic['encoder']) > 0.
  assert _max_diff(state.policy, new.policy) > 0.
  # Targets (Polyak): the encoder at encoder_tau, Q-head and policy at tau.
  np.testing.assert_allclose(
      _leaf(new.target_critic['encoder']),
      (1 - CFG.pixels.encoder_tau) * _leaf(state.target_critic['encoder'])
      + CFG.pixels.encoder_tau * _leaf(new.critic['encoder']), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      _leaf(new.target_critic['q']),
      (1 - CFG.tau) * _leaf(state.target_critic['q'])
      + CFG.tau * _leaf(new.critic['q']), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      _leaf(new.target_policy),
      (1 - CFG.tau) * _leaf(state.target_policy)
      + CFG.tau * _leaf(new.policy), rtol=1e-5, atol=1e-7)
  # With the critic's learning rate at 0 the policy (and dual) losses still
  # move the policy, and leave the encoder exactly as it was: they send it
  # no gradient (the policy reads stop-gradient features).
  frozen = mpo.make(dataclasses.replace(CFG, critic_lr=0.), SPEC)
  new, _ = jax.jit(frozen.update)(state, batch, jax.random.PRNGKey(2))
  assert _max_diff(state.policy, new.policy) > 0.
  for x, y in zip(jax.tree.leaves(state.critic['encoder']),
                  jax.tree.leaves(new.critic['encoder'])):
    np.testing.assert_array_equal(x, y)


def test_pixel_hard_target_copies_include_the_encoder():
  recipe = mpo.make(dataclasses.replace(CFG, target_update_period=2), SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  update = jax.jit(recipe.update)
  one, _ = update(state, _batch(jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
  assert _max_diff(one.target_critic, state.target_critic) == 0.
  two, _ = update(one, _batch(jax.random.PRNGKey(3)), jax.random.PRNGKey(4))
  assert _max_diff(two.target_critic, two.critic) == 0.
  assert _max_diff(two.target_policy, two.policy) == 0.


def _conv_inputs(jaxpr):
  """The operand shapes of every convolution in `jaxpr`, nested ones too."""
  shapes = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'conv_general_dilated':
      shapes.append(tuple(eqn.invars[0].aval.shape))
    for sub in jax_core.jaxprs_in_params(eqn.params):
      shapes += _conv_inputs(sub)
  return shapes


@pytest.mark.parametrize('augment_pad', [0, 4])
def test_each_observation_is_encoded_once_per_update(augment_pad):
  """The E-step's N samples reuse one encoding of each next observation."""
  batch = _batch(jax.random.PRNGKey(1))
  calls, convs = {}, {}
  for n in (2, 16):
    cfg = config_lib.apply_overrides(CFG, dict(num_samples=n,
                                                 augment_pad=augment_pad))
    recipe = mpo.make(cfg, SPEC)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)
    seen = []

    def count(next_f, args, kwargs, context, seen=seen):
      if (isinstance(context.module, networks.PixelEncoder)
          and context.method_name == '__call__'):
        seen.append(tuple(jnp.shape(args[0])))
      return next_f(*args, **kwargs)

    with hk.intercept_methods(count):
      jaxpr = jax.make_jaxpr(recipe.update)(state, batch,
                                            jax.random.PRNGKey(2))
    calls[n] = seen
    convs[n] = sorted(_conv_inputs(jaxpr.jaxpr))
  # Three encoder passes, each over the batch alone (no sample axis): obs
  # (online, critic loss), next_obs (target: target policy and critic),
  # next_obs (online, stop-gradient: the M-step's policy).
  stacked = (8, 16, 16, SPEC.obs_shapes[0][1][-1])
  assert calls[2] == calls[16] == [stacked] * 3
  # The compiled update's convolutions (forward and backward) are the same,
  # over the same shapes, whatever the number of samples.
  assert convs[2] and convs[2] == convs[16]


def test_augmentation_is_a_config_switch():
  batch = _batch(jax.random.PRNGKey(1))
  outs = []
  for pad in (0, 4):
    recipe = mpo.make(config_lib.apply_overrides(CFG, dict(augment_pad=pad)), SPEC)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)
    new, _ = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(2))
    outs.append(_leaf(new.critic['encoder']))
  assert not np.allclose(outs[0], outs[1])


# ~47 s; a pixel run through roxie.run stays fast (test_pixels_train.py).
@pytest.mark.slow
def test_cli_trains_mpo_from_pixels(tmp_path, capsys, gl_backend):
  out_dir = tmp_path / 'run'
  tiny = ['encoder_channels=8,8', 'encoder_strides=2,2',
          'encoder_feature_size=16', 'hidden_sizes=16,16', 'batch_size=16',
          'replay_capacity=2000', 'warmup_steps=64', 'num_samples=4',
          'updates_per_iteration=1', 'action_repeat=1']
  argv = ['train', '--agent', 'mpo', '--task', 'CartpoleSwingup', '--obs',
          'pixels', '--resolution', '16', '--frame-stack', '2', '--steps',
          '256', '--num-envs', '2', '--eval-every', '128',
          '--eval-episodes', '1', '--episode-length', '32', '--out',
          str(out_dir), '--quiet']
  for item in tiny:
    argv += ['--set', item]
  code = cli.main(argv)
  out, err = capsys.readouterr()
  assert code == 0, err
  final = [l for l in out.splitlines() if l.startswith('final eval_return=')]
  assert len(final) == 1 and 'env_steps=256' in final[0]
  with open(out_dir / 'config.json') as f:
    meta = json.load(f)
  # MPO's PIXEL_DEFAULTS apply under --set.
  assert meta['config']['critic_lr'] == mpo.PIXEL_DEFAULTS['critic_lr']
  # From pixels the policy keeps the rate its pixel runs were measured at,
  # not the state-based default's 1e-3.
  assert mpo.Config().policy_lr == 1e-3
  assert meta['config']['policy_lr'] == 3e-4
  assert meta['config']['batch_size'] == 16
  # The exported policy carries the encoder (and agrees with the recipe).
  policy = export.policy_from_run(str(out_dir), check=True)
  assert set(policy.params) == {'policy', 'encoder'}
  obs = export._example_obs(policy.spec, 3, jax.random.PRNGKey(0))
  assert policy(obs).shape == (3, 1)
