"""Update cost: each recipe's `update` vs the same math hand-fused in one function.

For every recipe in `roxie.agents.AGENTS` (a recipe that fails to import or
build is skipped with the reason printed), on CheetahRun-like shapes
(observation 17, action 6) with the recipe's default Config (batch size,
network sizes, optimiser):

  recipe    the recipe's `update`, jitted, `--updates` calls per program in a
            `lax.scan` over distinct synthetic batches (as the compiled loop
            runs it), agent state donated;
  fused     the same math written here as ONE plain function: jnp MLPs on
            flat parameter dicts, losses inline, Adam applied inline with
            optax; no haiku, no roxie primitives, no recipe structure. It is
            the practical limit for the same arithmetic. Written for DDPG,
            TD3, SAC and PPO (the whole PPO update: GAE, observation
            statistics, epochs x minibatches; reported per update and per
            minibatch step);
  ratio     fused / recipe time (median of per-repeat ratios of interleaved
            runs); target >= 0.95, i.e. the recipe costs at most ~5% more;
  check     max |difference| of the parameters after one update of both
            from the same state, batch and key (the fused version is the same
            math, not an approximation of it).

Against the machine: each recipe update's achieved GFLOP/s (the FLOPs of
its matrix products, counted from its jaxpr by `_harness.matmul_flops`,
over its measured time) beside the dense float32
matrix-product rate measured in the same run (`matmul_peak`: square
products of 256 to 1024, the best median; the practical ceiling for this
arithmetic on this CPU with XLA's own kernels, all threads), and the
fraction of it the update reaches. An update-bound agent cannot run faster
than its FLOPs at that rate. (Until 2026-12-02 the FLOPs came from XLA's
cost analysis, which counts a loop body once: the scanned updates reported
one update's FLOPs divided by the number of updates, 10x too few, and the
fractions in benchmarks/RESULTS.md before that date are 10x too low.)

Timing: compile first, one warm-up call each, then `--repeats` calls of each
in alternating order (A B, B A, ...), each ended by `block_until_ready`;
medians. Compare figures from the same run only: the machine may be shared.

  python benchmarks/update_cost.py --quick
  python benchmarks/update_cost.py --variant 'res1:critic_blocks=1;critic_width=256'
  python benchmarks/update_cost.py --agents sac,td3 --repeats 30
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np
import optax

import _harness as H  # pylint: disable=g-import-not-at-top
from roxie import buffers
from roxie.types import EnvSpec, Rollout, Transition

SPEC = EnvSpec(task='CheetahRun-like', obs_size=17, action_size=6,
               obs_names=(('obs', 17),), control_timestep=0.01,
               episode_length=1000)
_LOG_2PI = math.log(2. * math.pi)
_LOG_2 = math.log(2.)


# ----------------------------------------------------------------------------
# Plain networks on flat parameters: {'layers': [{'w','b'[,'scale','offset']}],
# 'head': {'w','b'}}, with a leading [K] axis on every leaf for an ensemble.
# ----------------------------------------------------------------------------

def _find(params: Dict[str, Any], suffix: str):
  hits = [k for k in params if k.endswith(suffix)]
  return params[hits[0]] if len(hits) == 1 else None


def from_haiku(params: Dict[str, Any]) -> Dict[str, Any]:
  """A roxie (haiku) MLP actor/critic's parameters in the flat layout here."""
  layers = []
  while True:
    i = len(layers)
    lin = _find(params, f'torso/linear_{i}')
    if lin is None:
      break
    layer = {'w': lin['w'], 'b': lin['b']}
    ln = _find(params, f'torso/layer_norm_{i}')
    if ln is not None:
      layer.update(scale=ln['scale'], offset=ln['offset'])
    layers.append(layer)
  head = _find(params, '/head') or _find(params, 'head/~/linear')
  out = {'layers': layers, 'head': {'w': head['w'], 'b': head['b']}}
  log_std = [v['log_std'] for v in params.values() if 'log_std' in v]
  if log_std:
    out['log_std'] = log_std[0]
  return out


def _layer_norm(x, scale, offset):
  mean = jnp.mean(x, -1, keepdims=True)
  var = jnp.var(x, -1, keepdims=True)
  return scale * jax.lax.rsqrt(var + 1e-5) * (x - mean) + offset


def mlp(p, x, activation=jax.nn.relu):
  """[N, D] -> [N, out]: (Linear, [LayerNorm], activation)*, head."""
  for layer in p['layers']:
    x = x @ layer['w'] + layer['b']
    if 'scale' in layer:
      x = _layer_norm(x, layer['scale'], layer['offset'])
    x = activation(x)
  return x @ p['head']['w'] + p['head']['b']


def twin_q(p, obs, action):
  """[N, O], [N, A] -> [2, N]: both critics in one batched pass."""
  x = jnp.concatenate([obs, action], -1)
  for j, layer in enumerate(p['layers']):
    spec = 'ni,kio->kno' if j == 0 else 'kni,kio->kno'
    x = jnp.einsum(spec, x, layer['w']) + layer['b'][:, None]
    if 'scale' in layer:
      x = _layer_norm(x, layer['scale'][:, None], layer['offset'][:, None])
    x = jax.nn.relu(x)
  q = jnp.einsum('kni,kio->kno', x, p['head']['w']) + p['head']['b'][:, None]
  return q[..., 0]


def _gauss_logp(mean, log_std, x):
  z = (x - mean) * jnp.exp(-log_std)
  return jnp.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, -1)


def _polyak(new, old, tau):
  return jax.tree.map(lambda n, o: tau * n + (1. - tau) * o, new, old)


def _opt(lr, max_grad_norm, eps=1e-8):
  adam = optax.adam(lr, eps=eps)
  return adam if max_grad_norm is None else optax.chain(
      optax.clip_by_global_norm(max_grad_norm), adam)


def _step(opt, grads, opt_state, params):
  updates, opt_state = opt.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state


# ----------------------------------------------------------------------------
# Hand-fused updates.
# ----------------------------------------------------------------------------

class Fused(NamedTuple):
  from_recipe: Callable[[Any], Any]  # recipe state -> fused state
  update: Callable[[Any, Any, Any], Tuple[Any, Dict[str, Any]]]
  params: Callable[[Any], Any]  # fused state -> params to compare


def fused_sac(c) -> Fused:
  actor_opt = _opt(c.actor_lr, c.max_grad_norm)
  critic_opt = _opt(c.critic_lr, c.max_grad_norm)
  alpha_opt = optax.adam(c.alpha_lr)
  target_entropy = (c.target_entropy if c.target_entropy is not None
                    else -float(SPEC.action_size))
  lo, hi = -5., 2.  # TanhGaussianActor's default log-std bounds.

  def policy(p, obs, key):
    mean, raw = jnp.split(mlp(p, obs), 2, -1)
    log_std = lo + 0.5 * (hi - lo) * (jnp.tanh(raw) + 1.)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    logp = _gauss_logp(mean, log_std, u) - jnp.sum(
        2. * (_LOG_2 - u - jax.nn.softplus(-2. * u)), -1)
    return jnp.tanh(u), logp

  def from_recipe(s):
    return dict(actor=from_haiku(s.actor), critic=from_haiku(s.critic),
                target=from_haiku(s.target_critic), log_alpha=s.log_alpha,
                actor_opt=actor_opt.init(from_haiku(s.actor)),
                critic_opt=critic_opt.init(from_haiku(s.critic)),
                alpha_opt=alpha_opt.init(s.log_alpha), steps=s.steps)

  def update(s, b: Transition, key):
    k_next, k_pi = jax.random.split(key)
    alpha = jnp.exp(s['log_alpha'])
    next_a, next_logp = policy(s['actor'], b.next_obs, k_next)
    q_next = jnp.min(twin_q(s['target'], b.next_obs, next_a), 0)
    y = jax.lax.stop_gradient(b.reward + b.discount * (q_next - alpha * next_logp))

    def critic_loss(p):
      q = twin_q(p, b.obs, b.action)
      return 0.5 * jnp.mean(jnp.sum(jnp.square(q - y), 0)), q
    (c_loss, q), g = jax.value_and_grad(critic_loss, has_aux=True)(s['critic'])
    critic, critic_os = _step(critic_opt, g, s['critic_opt'], s['critic'])

    def actor_loss(p):
      a, logp = policy(p, b.obs, k_pi)
      q_pi = jnp.min(twin_q(critic, b.obs, a), 0)
      return jnp.mean(jax.lax.stop_gradient(alpha) * logp - q_pi), logp
    (a_loss, logp), g = jax.value_and_grad(actor_loss, has_aux=True)(s['actor'])
    actor, actor_os = _step(actor_opt, g, s['actor_opt'], s['actor'])

    gap = -jax.lax.stop_gradient(logp) - target_entropy
    al_loss, g = jax.value_and_grad(
        lambda la: jnp.mean(jnp.exp(la) * gap))(s['log_alpha'])
    log_alpha, alpha_os = _step(alpha_opt, g, s['alpha_opt'], s['log_alpha'])
    new = dict(actor=actor, critic=critic,
               target=_polyak(critic, s['target'], c.tau),
               log_alpha=log_alpha, actor_opt=actor_os, critic_opt=critic_os,
               alpha_opt=alpha_os, steps=s['steps'] + 1)
    return new, {'critic_loss': c_loss, 'actor_loss': a_loss,
                 'alpha_loss': al_loss, 'alpha': alpha, 'q': jnp.mean(q),
                 'entropy': -jnp.mean(logp)}

  return Fused(from_recipe, update,
               lambda s: (s['actor'], s['critic'], s['target'], s['log_alpha']))


def _recipe_params_sac(s):
  return (from_haiku(s.actor), from_haiku(s.critic),
          from_haiku(s.target_critic), s.log_alpha)


def fused_td3(c, twin: bool = True, delay: Optional[int] = None) -> Fused:
  """TD3; with twin=False and delay=1 (and no smoothing) it is DDPG."""
  actor_opt = _opt(c.actor_lr, c.max_grad_norm)
  critic_opt = _opt(c.critic_lr, c.max_grad_norm)
  delay = c.policy_delay if delay is None else delay
  noise_std = optax.linear_schedule(c.noise_start, c.noise_end,
                                    c.noise_decay_updates)

  def mu(p, obs):
    return jnp.tanh(mlp(p, obs))

  def q_fn(p, obs, a):  # DDPG's single critic: plain matmuls.
    if twin:
      return twin_q(p, obs, a)
    return mlp(p, jnp.concatenate([obs, a], -1))[..., 0]

  def from_recipe(s):
    a, cr = from_haiku(s.actor), from_haiku(s.critic)
    return dict(actor=a, critic=cr, target_actor=from_haiku(s.target_actor),
                target_critic=from_haiku(s.target_critic),
                actor_opt=actor_opt.init(a), critic_opt=critic_opt.init(cr),
                steps=s.steps)

  def update(s, b: Transition, key):
    explore = noise_std(s['steps'])
    next_a = mu(s['target_actor'], b.next_obs)
    if twin:
      eps = jnp.clip(c.target_noise * jax.random.normal(key, next_a.shape),
                     -c.target_noise_clip, c.target_noise_clip)
      next_a = jnp.clip(next_a + eps, -1., 1.)
      q_next = jnp.min(q_fn(s['target_critic'], b.next_obs, next_a), 0)
    else:
      q_next = q_fn(s['target_critic'], b.next_obs, next_a)
    y = jax.lax.stop_gradient(b.reward + b.discount * q_next)

    def critic_loss(p):
      q = q_fn(p, b.obs, b.action)
      err = jnp.square(q - y)
      return 0.5 * jnp.mean(jnp.sum(err, 0) if twin else err), q
    (c_loss, q), g = jax.value_and_grad(critic_loss, has_aux=True)(s['critic'])
    critic, critic_os = _step(critic_opt, g, s['critic_opt'], s['critic'])
    s = dict(s, critic=critic, critic_opt=critic_os, steps=s['steps'] + 1)

    def actor_loss(p):
      q_pi = q_fn(s['critic'], b.obs, mu(p, b.obs))
      return -jnp.mean(q_pi[0] if twin else q_pi)

    def learn_actor(s):
      a_loss, g = jax.value_and_grad(actor_loss)(s['actor'])
      actor, actor_os = _step(actor_opt, g, s['actor_opt'], s['actor'])
      return dict(s, actor=actor, actor_opt=actor_os,
                  target_actor=_polyak(actor, s['target_actor'], c.tau),
                  target_critic=_polyak(s['critic'], s['target_critic'],
                                        c.tau)), a_loss * delay

    if delay == 1:
      s, a_loss = learn_actor(s)
    else:
      s, a_loss = jax.lax.cond(s['steps'] % delay == 0, learn_actor,
                               lambda s: (s, jnp.zeros(())), s)
    return s, {'critic_loss': c_loss, 'actor_loss': a_loss, 'q': jnp.mean(q),
               'noise_std': explore}

  return Fused(from_recipe, update,
               lambda s: (s['actor'], s['critic'], s['target_actor'],
                          s['target_critic']))


def _recipe_params_td3(s):
  return tuple(from_haiku(p) for p in (s.actor, s.critic, s.target_actor,
                                       s.target_critic))


def fused_ddpg(c) -> Fused:
  if c.saturation_weight > 0:
    raise NotImplementedError('fused DDPG is written without the saturation '
                              'penalty')
  # DDPG's recipe has no smoothing noise and no delay; reuse TD3's body.
  return fused_td3(c, twin=False, delay=1)


def _recipe_params_ddpg(s):
  # DDPG's critic is a plain QCritic: its leaves carry no ensemble axis.
  return _recipe_params_td3(s)


def fused_ppo(c) -> Fused:
  opt = _opt(c.learning_rate, c.max_grad_norm, eps=1e-5)
  lo, hi = c.log_std_range

  def normalise(stats, x):
    if not c.normalize_observations:
      return x
    count, mean, var = stats
    del count
    return jnp.clip((x - mean) * jax.lax.rsqrt(var + 1e-8), -c.obs_clip,
                    c.obs_clip)

  def pi(p, stats, obs):
    mean = mlp(p, normalise(stats, obs), jnp.tanh)
    return mean, jnp.broadcast_to(jnp.clip(p['log_std'], lo, hi), mean.shape)

  def v(p, stats, obs):
    return mlp(p, normalise(stats, obs), jnp.tanh)[..., 0]

  def from_recipe(s):
    a, cr = from_haiku(s.actor), from_haiku(s.critic)
    stats = (buffers.normalizer_count(s.obs_stats), s.obs_stats.mean +
             s.obs_stats.mean_lo, s.obs_stats.var + s.obs_stats.var_lo)
    return dict(actor=a, critic=cr, actor_opt=opt.init(a),
                critic_opt=opt.init(cr), stats=stats, steps=s.steps)

  def update(s, r: Rollout, key):
    # GAE over [T, B], cut at episode ends, bootstrapping from final_obs.
    v_next = v(s['critic'], s['stats'], r.final_obs)
    disc = c.discount * (1. - r.terminated.astype(jnp.float32))
    delta = r.reward + disc * v_next - r.extras['value']
    trace = jnp.where(r.terminated | r.truncated, 0., disc * c.gae_lambda)

    def back(a_next, xs):
      a = xs[0] + xs[1] * a_next
      return a, a
    _, adv = jax.lax.scan(back, jnp.zeros_like(delta[0]), (delta, trace),
                          reverse=True)
    ret = adv + r.extras['value']

    # Observation statistics (parallel mean/variance merge).
    stats = s['stats']
    if c.normalize_observations:
      n0, m0, v0 = stats
      x = r.obs.reshape(-1, r.obs.shape[-1])
      n1 = x.shape[0]
      m1, v1 = jnp.mean(x, 0), jnp.var(x, 0)
      n = n0 + n1
      d = m1 - m0
      w = n1 / n
      merged = (n, m0 + w * d, v0 + w * ((v1 - v0) + (1. - w) * d * d))
      stats = jax.tree.map(lambda a, b: jnp.where(n0 == 0, a, b),
                           (n, m1, v1), merged)

    total = r.reward.size
    flat = lambda x: x.reshape((total,) + x.shape[2:])
    data = (flat(r.obs), flat(r.extras['raw_action']),
            flat(r.extras['log_prob']), flat(adv), flat(ret))

    def loss(params, mb):
      obs, raw, old_logp, a, target = mb
      mean, log_std = pi(params[0], stats, obs)
      logp = _gauss_logp(mean, log_std, raw)
      if c.normalize_advantages:
        a = (a - jnp.mean(a)) / (jnp.std(a) + 1e-8)
      log_ratio = logp - old_logp
      ratio = jnp.exp(log_ratio)
      clipped = jnp.clip(ratio, 1. - c.clip_epsilon, 1. + c.clip_epsilon)
      surrogate = -jnp.mean(jnp.minimum(ratio * a, clipped * a))
      entropy = jnp.mean(jnp.sum(log_std + 0.5 * (1. + _LOG_2PI), -1))
      v_loss = 0.5 * jnp.mean(jnp.square(v(params[1], stats, obs) - target))
      ratio, log_ratio = jax.lax.stop_gradient((ratio, log_ratio))
      metrics = {'policy_loss': surrogate, 'value_loss': v_loss,
                 'entropy': entropy,
                 'approx_kl': jnp.mean(ratio - 1. - log_ratio),
                 'clip_fraction': jnp.mean(
                     (jnp.abs(ratio - 1.) > c.clip_epsilon).astype(
                         jnp.float32))}
      return surrogate - c.entropy_coef * entropy + v_loss, metrics

    def minibatch(carry, mb):
      params, states = carry
      g, metrics = jax.grad(loss, has_aux=True)(params, mb)
      a, a_os = _step(opt, g[0], states[0], params[0])
      cr, c_os = _step(opt, g[1], states[1], params[1])
      return ((a, cr), (a_os, c_os)), metrics

    def epoch(carry, k):
      order = jax.random.permutation(k, total)
      mbs = jax.tree.map(lambda x: x[order].reshape(
          (c.num_minibatches, -1) + x.shape[1:]), data)
      return jax.lax.scan(minibatch, carry, mbs)

    ((actor, critic), (a_os, c_os)), metrics = jax.lax.scan(
        epoch, ((s['actor'], s['critic']), (s['actor_opt'], s['critic_opt'])),
        jax.random.split(key, c.num_epochs))
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics['std'] = jnp.mean(jnp.exp(pi(actor, stats, r.last_obs)[1]))
    metrics['value'] = jnp.mean(r.extras['value'])
    return dict(actor=actor, critic=critic, actor_opt=a_os, critic_opt=c_os,
                stats=stats, steps=s['steps'] + 1), metrics

  return Fused(from_recipe, update, lambda s: (s['actor'], s['critic']))


def _recipe_params_ppo(s):
  return (from_haiku(s.actor), from_haiku(s.critic))


FUSED = {
    'sac': (fused_sac, _recipe_params_sac),
    'td3': (fused_td3, _recipe_params_td3),
    'ddpg': (fused_ddpg, _recipe_params_ddpg),
    'ppo': (fused_ppo, _recipe_params_ppo),
}


# ----------------------------------------------------------------------------
# Synthetic data.
# ----------------------------------------------------------------------------

def synthetic_transitions(key, n: int, batch: int,
                          spec: EnvSpec = SPEC) -> Transition:
  """[n, batch, ...] n-step transitions of `spec` with some terminal windows."""
  ks = jax.random.split(key, 5)
  o, a = spec.obs_size, spec.action_size
  return Transition(
      obs=jax.random.normal(ks[0], (n, batch, o)),
      action=jax.random.uniform(ks[1], (n, batch, a), minval=-1., maxval=1.),
      reward=jax.random.uniform(ks[2], (n, batch)),
      discount=jnp.where(jax.random.uniform(ks[3], (n, batch)) < 0.01, 0.,
                         0.99 ** 3),
      next_obs=jax.random.normal(ks[4], (n, batch, o)))


def synthetic_rollouts(recipe, state, key, n: int, num_envs: int,
                       spec: EnvSpec = SPEC) -> Rollout:
  """[n] rollouts of [T, B = num_envs] of `spec`'s observations, with
  extras from the recipe's `act`."""
  t, b, o = recipe.rollout_length, num_envs, spec.obs_size
  ks = jax.random.split(key, 6)
  obs = jax.random.normal(ks[0], (n, t, b, o))
  _, extras = jax.vmap(lambda x, k: recipe.act(state, x, k, explore=True))(
      obs.reshape(n * t, b, o), jax.random.split(ks[1], n * t))
  extras = jax.tree.map(lambda x: x.reshape((n, t) + x.shape[1:]), extras)
  ended = jax.random.uniform(ks[2], (n, t, b)) < 0.01
  final_obs = jnp.where(ended[..., None],
                        jax.random.normal(ks[3], obs.shape),
                        jnp.roll(obs, -1, axis=1))
  return Rollout(obs=obs, action=jnp.clip(extras['raw_action'], -1., 1.),
                 reward=jax.random.uniform(ks[4], (n, t, b)),
                 terminated=ended & (jax.random.uniform(ks[5], (n, t, b)) < .5),
                 truncated=ended, final_obs=final_obs, extras=extras,
                 last_obs=jax.random.normal(ks[5], (n, b, o)))


# ----------------------------------------------------------------------------
# Measurement.
# ----------------------------------------------------------------------------

def many(update, state, batches, key):
  """U updates in a lax.scan over [U, ...] batches; metrics averaged."""
  n = jax.tree.leaves(batches)[0].shape[0]
  state, metrics = jax.lax.scan(lambda s, x: update(s, *x), state,
                                (batches, jax.random.split(key, n)))
  return state, jax.tree.map(jnp.mean, metrics)


def scanned(update):
  """jit(state, batches[U], key) -> (state, mean metrics), state donated."""
  return jax.jit(functools.partial(many, update), donate_argnums=(0,))


def hlo_cost(compiled) -> Tuple[float, float]:
  """(GFLOP, MB accessed) of a compiled program, by XLA's cost analysis."""
  try:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
      cost = cost[0]
    return cost.get('flops', float('nan')) / 1e9, cost.get(
        'bytes accessed', float('nan')) / 1e6
  except Exception:  # pylint: disable=broad-except
    return float('nan'), float('nan')


def compile_and_runner(fn, state, batches, key, costs=None):
  """(compile seconds, a no-argument call that blocks) for `fn`."""
  t0 = time.perf_counter()
  compiled = fn.lower(state, batches, key).compile()
  compile_s = time.perf_counter() - t0
  if costs is not None:
    costs.append(hlo_cost(compiled))
  box = [jax.tree.map(jnp.copy, state)]

  def call():
    box[0], metrics = compiled(box[0], batches, key)
    jax.block_until_ready((box[0], metrics))
  return compile_s, call


def max_abs_diff(a, b) -> float:
  return max(float(jnp.max(jnp.abs(x - y)))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def measure(name, args):
  from roxie import agents  # pylint: disable=g-import-not-at-top
  module = agents.get_agent(name)
  cfg = module.Config()
  recipe = module.make(cfg, SPEC)
  key = jax.random.PRNGKey(0)
  state = jax.jit(lambda k: recipe.init(k, SPEC))(key)
  if recipe.on_policy:
    n = args.ppo_updates
    num_envs = module.RUN_DEFAULTS.num_envs
    batches = synthetic_rollouts(recipe, state, jax.random.PRNGKey(1), n,
                                 num_envs)
    steps = cfg.num_epochs * cfg.num_minibatches
    shape = (f'rollout {cfg.rollout_length}x{num_envs}, '
             f'{cfg.num_epochs}x{cfg.num_minibatches} minibatches of '
             f'{cfg.rollout_length * num_envs // cfg.num_minibatches}')
  else:
    n = args.updates
    batches = synthetic_transitions(jax.random.PRNGKey(1), n,
                                    recipe.replay.batch_size)
    steps = 1
    shape = f'batch {recipe.replay.batch_size}'
  shape += f', hidden {tuple(cfg.hidden_sizes)}'
  fns = [scanned(recipe.update)]
  fused = None
  check = float('nan')
  if name in FUSED and not args.no_fused:
    make_fused, recipe_params = FUSED[name]
    try:
      fused = make_fused(cfg)
    except NotImplementedError as e:
      print(f'  {name}: no fused version for this config ({e})')
  if fused is not None:
    fstate = fused.from_recipe(state)
    fns.append(scanned(fused.update))
    # Same state, batches and key: two updates each (TD3's actor moves on
    # the second), then compare parameters.
    one = jax.tree.map(lambda x: x[:2], batches)
    k = jax.random.PRNGKey(2)
    r_new, _ = jax.jit(functools.partial(many, recipe.update))(state, one, k)
    f_new, _ = jax.jit(functools.partial(many, fused.update))(fstate, one, k)
    check = max_abs_diff(recipe_params(r_new), fused.params(f_new))
  key = jax.random.PRNGKey(3)
  compiles, calls, costs = [], [], []
  # The products' FLOPs per update, counted from the jaxpr (a scan body
  # times its length; XLA's cost analysis counts a loop body once).
  updates = [recipe.update] + ([fused.update] if fused else [])
  states = [state] + ([fstate] if fused else [])
  gflops = []
  for upd, st in zip(updates, states):
    try:
      gflops.append(H.matmul_flops(functools.partial(many, upd), st, batches,
                                   key) / n / 1e9)
    except ValueError:  # A while loop: no static trip count.
      gflops.append(float('nan'))
  for fn, st in zip(fns, states):
    c_s, call = compile_and_runner(fn, st, batches, key, costs)
    compiles.append(c_s)
    calls.append(call)
  cpu = []
  times = H.interleaved(calls, args.repeats, warmup=1, cpu=cpu)
  per_update = [1e3 * H.median(t) / n for t in times]
  ratio = best_ratio = cpu_ratio = float('nan')
  if fused is not None:
    ratio = H.median([f / r for r, f in zip(times[0], times[1])])
    best_ratio = min(times[1]) / min(times[0])
    cpu_ratio = H.median(cpu[1]) / H.median(cpu[0])
  return dict(name=name, shape=shape, n=n, steps=steps, recipe_ms=per_update[0],
              fused_ms=per_update[1] if fused else float('nan'),
              ratio=ratio, best_ratio=best_ratio, cpu_ratio=cpu_ratio,
              flops=gflops[0],
              flops_ratio=(gflops[0] / gflops[1]) if fused else float('nan'),
              bytes_ratio=(costs[0][1] / costs[1][1]) if fused else float('nan'),
              check=check, compile_recipe=compiles[0],
              compile_fused=compiles[1] if fused else float('nan'),
              spread=100 * (np.percentile(times[0], 75) -
                            np.percentile(times[0], 25)) / H.median(times[0]))


def matmul_peak(repeats: int, sizes=(256, 512, 1024)) -> Tuple[float, int]:
  """(GFLOP/s, size): the best median rate of square f32 matrix products.

  Each product is jitted on its own, so XLA's CPU backend runs it as one
  library call on all threads: the ceiling the updates' matrix products
  could reach here, measured under the same load as they are.
  """
  best = (0.0, 0)
  for n in sizes:
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    reps = max(3, int(min(50, 2e9 / (2 * n ** 3))))  # ~>= 1 GFLOP per timing
    def call(f=f, a=a, b=b, reps=reps):
      for _ in range(reps):
        out = f(a, b)
      out.block_until_ready()
    t = H.median(H.interleaved([call], repeats, warmup=1)[0]) / reps
    best = max(best, (2 * n ** 3 / t / 1e9, n))
  return best


def _f(x, spec):
  return '-' if (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def batch_sweep(args):
  """SAC's update cost as the batch grows (recipe and fused)."""
  from roxie.agents import sac  # pylint: disable=g-import-not-at-top
  rows = []
  for bs in args.batch_sweep:
    cfg = sac.Config(batch_size=bs)
    recipe = sac.make(cfg, SPEC)
    state = jax.jit(lambda k, r=recipe: r.init(k, SPEC))(jax.random.PRNGKey(0))
    fused = fused_sac(cfg)
    batches = synthetic_transitions(jax.random.PRNGKey(1), args.updates, bs)
    key = jax.random.PRNGKey(3)
    calls = [compile_and_runner(scanned(recipe.update), state, batches, key)[1],
             compile_and_runner(scanned(fused.update), fused.from_recipe(state),
                                batches, key)[1]]
    t = H.interleaved(calls, args.repeats)
    r_ms, f_ms = (1e3 * H.median(x) / args.updates for x in t)
    rows.append([str(bs), f'{r_ms:.3f}', f'{f_ms:.3f}',
                 f'{H.median([f / r for r, f in zip(*t)]):.3f}',
                 f'{1e3 * r_ms / bs:.2f}'])
    print(f'  batch {bs}: recipe {r_ms:.3f} ms, fused {f_ms:.3f} ms',
          flush=True)
  print()
  print('SAC update cost vs batch size')
  print(H.fmt_table(['batch', 'recipe ms', 'fused ms', 'fused/recipe',
                     'us/sample'], rows))


def parse_variant(text: str) -> Tuple[str, Dict[str, str]]:
  """'res1:critic_blocks=1;critic_width=256' -> ('res1', {field: text})."""
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  name, sep, rest = text.partition(':')
  if not sep or not name or not rest:
    raise SystemExit(f'update_cost.py: --variant {text!r} is not of the form '
                     'NAME:FIELD=VALUE[;FIELD=VALUE...]')
  try:
    return name, config_lib.parse_overrides(rest.split(';'))
  except config_lib.ConfigError as e:
    raise SystemExit(f'update_cost.py: --variant {text!r}: {e}') from None


def variant_configs(args):
  """[(agent, [(variant, overrides, recipe)])], the default first.

  Every agent, override and recipe is checked here, before anything is
  timed, so a bad --variant or --variant-agents is refused at once rather
  than after the agents before it have run.
  """
  from roxie import agents  # pylint: disable=g-import-not-at-top
  from roxie import config as config_lib  # pylint: disable=g-import-not-at-top
  out = []
  for name in args.variant_agents:
    try:
      module = agents.get_agent(name)
    except KeyError as e:
      raise SystemExit(f'update_cost.py: --variant-agents: {e.args[0]}'
                       ) from None
    configs = [('default', {}, module.Config())]
    for vname, overrides in args.variant:
      try:
        cfg = config_lib.validate(config_lib.apply_overrides(
            module.Config(), overrides))
      except config_lib.ConfigError as e:
        raise SystemExit(f'update_cost.py: --variant {vname} for {name}: '
                         f'{e}') from None
      configs.append((vname, overrides, cfg))
    recipes = [(v, o, module.make(cfg, SPEC)) for v, o, cfg in configs]
    if recipes[0][2].on_policy:
      raise SystemExit('update_cost.py: --variant times off-policy '
                       f'recipes; {name} is on-policy.')
    out.append((name, recipes))
  return out


def variant_sweep(args):
  """Each agent's update at its default Config and at each --variant.

  Every config's update is timed in one interleaved set with the default's,
  so the ratio (variant time / default time, median of per-repeat ratios)
  is a same-run figure; GFLOP/upd are the matrix products per update,
  counted from the jaxpr.
  """
  rows = []
  for name, configs in variant_configs(args):
    calls, gflops, n = [], [], args.updates
    for _, _, recipe in configs:
      state = jax.jit(lambda k, r=recipe: r.init(k, SPEC))(
          jax.random.PRNGKey(0))
      batches = synthetic_transitions(jax.random.PRNGKey(1), n,
                                      recipe.replay.batch_size)
      key = jax.random.PRNGKey(3)
      gflops.append(H.matmul_flops(functools.partial(many, recipe.update),
                                   state, batches, key) / n / 1e9)
      calls.append(compile_and_runner(scanned(recipe.update), state, batches,
                                      key)[1])
    cpu = []
    times = H.interleaved(calls, args.repeats, cpu=cpu)
    for i, (vname, overrides, _) in enumerate(configs):
      rows.append([name, vname,
                   ';'.join(f'{k}={v}' for k, v in overrides.items()) or '-',
                   f'{1e3 * H.median(times[i]) / n:.3f}',
                   f'{H.median([t / d for d, t in zip(times[0], times[i])]):.2f}',
                   f'{H.median(cpu[i]) / H.median(cpu[0]):.2f}',
                   f'{gflops[i]:.3f}', f'{gflops[i] / gflops[0]:.2f}'])
      print(f'  {name} {vname}: {rows[-1][3]} ms/update, x{rows[-1][4]} the '
            f'default [load {H.load_now()}]', flush=True)
  print()
  print('update cost of config variants, each against its agent\'s default '
        'in the same interleaved run (x: median of per-repeat time ratios; '
        'cpu x: process CPU time; flops x: matrix products per update)')
  print(H.fmt_table(['agent', 'variant', 'overrides', 'ms/update', 'x',
                     'cpu x', 'GFLOP/upd', 'flops x'], rows))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--agents', default=None,
                      help='comma-separated (default: all of roxie.agents)')
  parser.add_argument('--updates', type=int, default=20,
                      help='off-policy updates per program (lax.scan)')
  parser.add_argument('--ppo-updates', type=int, default=2,
                      help='whole PPO updates (rollouts) per program')
  parser.add_argument('--repeats', type=int, default=21)
  parser.add_argument('--quick', action='store_true',
                      help='fewer repeats and updates (a few minutes on 2 cores)')
  parser.add_argument('--no-fused', action='store_true')
  parser.add_argument('--batch-sweep', default='',
                      help='also time SAC at these batch sizes, e.g. 64,256,1024')
  parser.add_argument('--variant', action='append', default=[],
                      metavar='NAME:FIELD=VALUE[;FIELD=VALUE]',
                      help='time only these config variants against the '
                      'default of --variant-agents (repeatable), e.g. '
                      'res1:critic_blocks=1;critic_width=256')
  parser.add_argument('--variant-agents', default='sac',
                      help='comma-separated agents for --variant (default: '
                      'sac)')
  args = parser.parse_args(argv)
  args.variant = [parse_variant(v) for v in args.variant]
  args.variant_agents = [a for a in args.variant_agents.split(',') if a]
  if args.quick:
    args.repeats = min(args.repeats, 9)
    args.updates = min(args.updates, 10)
    args.ppo_updates = 1
  args.batch_sweep = [int(x) for x in args.batch_sweep.split(',') if x]
  from roxie import agents  # pylint: disable=g-import-not-at-top
  names = args.agents.split(',') if args.agents else list(agents.AGENTS)
  if args.variant:
    print(H.machine_header(
        'update_cost --variant: config variants against the default, '
        'CheetahRun-like obs 17 / act 6', [
            f'updates per program {args.updates}, {args.repeats} '
            'interleaved repeats, median']), flush=True)
    variant_sweep(args)
    print(f'\nload average at end: {H.load_now()}')
    return 0
  print(H.machine_header(
      'update_cost: recipe update vs hand-fused, CheetahRun-like obs 17 / '
      'act 6', [f'updates per program {args.updates} (PPO: '
                f'{args.ppo_updates} whole updates), {args.repeats} '
                'interleaved repeats, median']), flush=True)
  peak, peak_n = matmul_peak(max(5, args.repeats // 2))
  print(f'  calibration: dense f32 matmul {peak:.1f} GFLOP/s (best of square '
        f'256..1024, at {peak_n}) [load {H.load_now()}]', flush=True)
  rows = []
  for name in names:
    t0 = time.perf_counter()
    try:
      r = measure(name, args)
    except Exception as e:  # an agent still being written: report and go on
      print(f'  {name}: SKIPPED ({type(e).__name__}: {e})', flush=True)
      if os.environ.get('ROXIE_BENCH_DEBUG'):
        traceback.print_exc()
      continue
    per_step = ''
    if r['steps'] > 1:
      per_step = f' ({r["recipe_ms"] / r["steps"]:.3f} ms per minibatch step)'
    print(f'  {name}: {r["shape"]}: recipe {r["recipe_ms"]:.3f} ms/update'
          f'{per_step}, fused {_f(r["fused_ms"], ".3f")}, ratio '
          f'{_f(r["ratio"], ".3f")} [{time.perf_counter() - t0:.0f} s, load '
          f'{H.load_now()}]', flush=True)
    meets = '-'
    if not math.isnan(r['ratio']):
      meets = 'yes' if r['ratio'] >= 0.95 else 'NO'
    rows.append([name, f'{r["recipe_ms"]:.3f}', _f(r['fused_ms'], '.3f'),
                 _f(r['ratio'], '.3f'), _f(r['best_ratio'], '.3f'),
                 _f(r['cpu_ratio'], '.3f'), meets,
                 f'{r["recipe_ms"] / r["steps"]:.3f}', f'{r["spread"]:.0f}%',
                 _f(r['flops'], '.3f'),
                 _f(r['flops'] / r['recipe_ms'] * 1e3, '.1f'),
                 _f(100 * r['flops'] / r['recipe_ms'] * 1e3 / peak, '.1f'),
                 _f(r['flops_ratio'], '.3f'),
                 _f(r['bytes_ratio'], '.3f'), _f(r['check'], '.1e'), f'{r["compile_recipe"]:.1f}',
                 _f(r['compile_fused'], '.1f')])
  print()
  print('ms per update (PPO: one whole update = epochs x minibatches; '
        '"per step" divides by them)')
  print('fused/recipe: median of per-repeat wall-time ratios (the target); '
        'best: fastest fused / fastest recipe (the least disturbed runs); '
        'cpu: the same with process CPU time; GFLOP/upd: the recipe\'s '
        'matrix products per update, counted from its jaxpr; GFLOP/s: that '
        'over the recipe\'s '
        f'time; % peak: of the dense matmul rate measured here ({peak:.1f} '
        'GFLOP/s); flops r/f: recipe over fused products; bytes r/f: XLA\'s '
        'bytes accessed, recipe over fused (load-independent: 1.000 means '
        'the same arithmetic and traffic)')
  print(H.fmt_table(['agent', 'recipe ms', 'fused ms', 'fused/recipe',
                     'best', 'cpu', '>=0.95', 'per step ms', 'IQR',
                     'GFLOP/upd', 'GFLOP/s', '% peak', 'flops r/f', 'bytes r/f', 'max|dparam|',
                     'compile s', 'fused compile s'], rows))
  if args.batch_sweep:
    print()
    batch_sweep(args)
  print(f'\nload average at end: {H.load_now()}')
  return 0


if __name__ == '__main__':
  try:
    sys.exit(main())
  except SystemExit as e:
    if not isinstance(e.code, str):
      raise
    # A refused input (the script's own messages): one line, exit status 2.
    print(e.code, file=sys.stderr)
    sys.exit(2)
