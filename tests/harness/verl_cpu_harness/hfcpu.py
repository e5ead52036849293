"""The ``hfcpu`` rollout backend: HF ``generate`` behind verl's async rollout-server API.

verl 0.9.1 has no synchronous rollout; every rollout goes through a server replica
(vLLM/SGLang/TRT-LLM) that agent-loop workers call token-in/token-out. This module gives
the same three pieces for CPU:

- ``HFCPUServer``: Ray actor, one per replica, running ``model.generate`` and returning
  ``TokenOutput``; the control methods verl calls (sleep, wake_up, ...) are no-ops.
- ``HFCPUReplica``: the ``RolloutReplica`` that starts that actor (hybrid mode).
- ``HFCPUServerAdapter``: the ``BaseRollout`` inside each training worker; on every
  ``update_weights`` it pushes the FSDP weights to its replica's server, so weight sync is real.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

_NAME_PREFIX = "hfcpu_server_"


def _server_name(replica_rank: int, name_suffix: str = "") -> str:
    return f"{_NAME_PREFIX}{replica_rank}_0{name_suffix}"


def _stuck_in_generate() -> None:
    threading.Event().wait()


# Fault injection for tests (opt-in): VERL_CPU_HARNESS_HANG_GROUP_AFTER=<n>: one prompt group never
# finishes, the others do: the prompt of the first sampled request after the n-th is the stuck one,
# and every sampled request with that prompt blocks forever in _stuck_in_generate (a group stuck on
# its replica), from then on.
HANG_GROUP_AFTER = "VERL_CPU_HARNESS_HANG_GROUP_AFTER"
_group_calls = [0]
_stuck_prompt: list[tuple[int, ...] | None] = [None]
_group_lock = threading.Lock()


def _maybe_hang(prompt_ids: list[int], params: dict[str, Any]) -> None:
    raw = os.environ.get(HANG_GROUP_AFTER, "")
    if raw.isdigit() and not _is_validation(params):
        with _group_lock:
            _group_calls[0] += 1
            if _stuck_prompt[0] is None and _group_calls[0] > int(raw):
                _stuck_prompt[0] = tuple(prompt_ids)
            stuck = _stuck_prompt[0] == tuple(prompt_ids)
        if stuck:
            _stuck_in_generate()


# Long tail and failures for tests (opt-in), counted over the server's sampled requests (temperature
# > 0: training; validation is greedy): VERL_CPU_HARNESS_SLOW_EVERY=<n>:<seconds> makes every n-th
# one wait <seconds> before it generates (a slow trajectory; the others go on meanwhile), and
# VERL_CPU_HARNESS_FAIL_EVERY=<n> makes every n-th one fail (a failed trajectory).
SLOW_EVERY = "VERL_CPU_HARNESS_SLOW_EVERY"
FAIL_EVERY = "VERL_CPU_HARNESS_FAIL_EVERY"
_sampled_calls = [0]


class InjectedFailure(RuntimeError):
    """The request VERL_CPU_HARNESS_FAIL_EVERY chose to fail."""


def _every(name: str) -> tuple[int, float] | None:
    raw = os.environ.get(name, "")
    every, _, seconds = raw.partition(":")
    if not every.isdigit() or int(every) < 1:
        return None
    try:
        return int(every), float(seconds or 0)
    except ValueError:
        return None


async def _maybe_slow_or_fail(params: dict[str, Any]) -> int | None:
    """The sampled request's number (1, 2, ...), after its injected wait; None for a greedy one."""
    if float(params.get("temperature", 1.0) or 0.0) <= 0:
        return None
    _sampled_calls[0] += 1
    n = _sampled_calls[0]
    fail = _every(FAIL_EVERY)
    if fail is not None and n % fail[0] == 0:
        raise InjectedFailure(f"hfcpu: sampled request {n} fails ({FAIL_EVERY})")
    slow = _every(SLOW_EVERY)
    if slow is not None and n % slow[0] == 0:
        await asyncio.sleep(slow[1])  # outside the model lock: the other requests go on
    return n


# Degenerate generations for tests (opt-in), counted over the same sampled requests:
# VERL_CPU_HARNESS_DEGENERATE_EVERY=<n> makes every n-th one answer, in turn, a loop (one ordinary
# token repeated up to the request's max tokens: repetitive and at the length limit) and an empty
# response (the end-of-sequence token alone). Their log-probs are the model's own for those tokens.
DEGENERATE_EVERY = "VERL_CPU_HARNESS_DEGENERATE_EVERY"
LOOP, EMPTY = "loop", "empty"


def _degenerate(n: int | None) -> str | None:
    every = _every(DEGENERATE_EVERY)
    if n is None or every is None or n % every[0]:
        return None
    return LOOP if (n // every[0]) % 2 else EMPTY


# Validation faults for the stall tests (opt-in). A validation request is a greedy one: verl's
# val_kwargs decode at temperature 0, training samples at the rollout temperature (1.0 here).
# VERL_CPU_HARNESS_SLOW_VALIDATION=<s>: each validation request takes s seconds longer (slept
# while holding the server's lock, so a validation of 16 prompts takes 16 s longer per second);
# VERL_CPU_HARNESS_HANG_VALIDATION_AFTER=<n>: validation requests after the n-th block forever in
# _stuck_in_validation.
SLOW_VALIDATION = "VERL_CPU_HARNESS_SLOW_VALIDATION"
HANG_VALIDATION_AFTER = "VERL_CPU_HARNESS_HANG_VALIDATION_AFTER"
_validation_calls = [0]


def _stuck_in_validation() -> None:
    threading.Event().wait()


def _is_validation(params: dict[str, Any]) -> bool:
    return float(params.get("temperature", 1.0) or 0.0) == 0.0


def _validation_faults(params: dict[str, Any], lock: threading.Lock) -> None:
    if not _is_validation(params):
        return
    _validation_calls[0] += 1
    hang = os.environ.get(HANG_VALIDATION_AFTER, "")
    if hang.isdigit() and _validation_calls[0] > int(hang):
        _stuck_in_validation()
    try:
        slow = float(os.environ.get(SLOW_VALIDATION, "") or 0.0)
    except ValueError:
        slow = 0.0
    if slow > 0:
        with lock:
            time.sleep(slow)


# Rollout/training mismatch for tests (opt-in): VERL_CPU_HARNESS_LOGPROB_NOISE=<sigma> adds Gaussian
# noise of that standard deviation to every log-prob the server returns (what the trainer compares with
# its own: verl's training/rollout_probs_diff_*, rollout_actor_probs_pearson_corr, rollout_corr/*), as a
# rollout engine whose numerics or weights disagree with the trainer's; the tokens it samples are
# unchanged, and so is training (verl recomputes the log-probs it trains on).
LOGPROB_NOISE = "VERL_CPU_HARNESS_LOGPROB_NOISE"


def _logprob_noise() -> float:
    try:
        sigma = float(os.environ.get(LOGPROB_NOISE, "") or 0.0)
    except ValueError:
        return 0.0
    return sigma if sigma > 0 and sigma < float("inf") else 0.0


def _perturbed(log_probs: list[float], sigma: float, generator: torch.Generator) -> list[float]:
    noise = torch.randn(len(log_probs), generator=generator, dtype=torch.float64) * sigma
    return [min(0.0, lp + float(n)) for lp, n in zip(log_probs, noise, strict=True)]  # still a log-prob


class HFCPUServer:
    def __init__(self, config, model_config, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.global_steps = None
        self._lock = threading.Lock()  # one generate / weight load at a time
        self._noise = torch.Generator().manual_seed(replica_rank)  # LOGPROB_NOISE's, under the lock

        torch.set_num_threads(1)
        torch.manual_seed(getattr(self.config, "seed", 0) + replica_rank)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path, torch_dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        tokenizer = self.model_config.tokenizer
        gen_cfg = self.model.generation_config
        self.eos_token_id = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id
        eos = self.eos_token_id
        self.end_token_id = eos[0] if isinstance(eos, (list, tuple)) else eos  # a degenerate empty response
        self.loop_token_id = tokenizer.encode("7", add_special_tokens=False)[0]  # an ordinary token

    # ---- token-in / token-out, same signature as vLLMHttpServer.generate ----------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        priority: int = 0,
        **kwargs,
    ) -> TokenOutput:
        n = await _maybe_slow_or_fail(sampling_params)
        return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params), _degenerate(n))

    def _generate(self, prompt_ids: list[int], params: dict[str, Any], degenerate: str | None = None) -> TokenOutput:
        _maybe_hang(prompt_ids, params)
        _validation_faults(params, self._lock)
        cfg = self.config
        max_tokens = params.pop("max_tokens", None) or params.pop("max_new_tokens", None)
        if max_tokens is None:  # as vLLMHttpServer: capped by response_length and the total budget
            max_tokens = min(cfg.response_length, cfg.prompt_length + cfg.response_length - len(prompt_ids))
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_k = int(params.get("top_k", -1) or -1)
        want_logprobs = bool(params.get("logprobs", False))
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=max(1, int(max_tokens)),
            do_sample=temperature > 0,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=want_logprobs,
        )
        if temperature > 0:
            gen_kwargs.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)), top_k=max(top_k, 0))
        if float(params.get("repetition_penalty", 1.0)) != 1.0:
            gen_kwargs["repetition_penalty"] = float(params["repetition_penalty"])

        if degenerate is not None:
            return self._forced(prompt_ids, gen_kwargs["max_new_tokens"], degenerate, want_logprobs)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        with self._lock, torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **gen_kwargs)
        token_ids = out.sequences[0, len(prompt_ids) :].tolist()
        log_probs = None
        if want_logprobs:
            log_probs = [
                torch.log_softmax(logits[0].float(), dim=-1)[tok].item()
                for logits, tok in zip(out.logits, token_ids, strict=False)
            ]
            if sigma := _logprob_noise():
                with self._lock:
                    log_probs = _perturbed(log_probs, sigma, self._noise)
        return self._output(token_ids, log_probs)

    def _output(self, token_ids: list[int], log_probs: list[float] | None) -> TokenOutput:
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    def _forced(self, prompt_ids: list[int], max_tokens: int, kind: str, want_logprobs: bool) -> TokenOutput:
        """A degenerate response (``DEGENERATE_EVERY``), with the model's log-probs of its tokens."""
        token_ids = [self.loop_token_id] * max_tokens if kind == LOOP else [self.end_token_id]
        log_probs = None
        if want_logprobs:
            input_ids = torch.tensor([prompt_ids + token_ids], dtype=torch.long)
            with self._lock, torch.no_grad():
                logits = self.model(input_ids=input_ids).logits[0, len(prompt_ids) - 1 : -1]
            log_probs = torch.log_softmax(logits.float(), dim=-1)[range(len(token_ids)), token_ids].tolist()
        return self._output(token_ids, log_probs)

    # ---- weight sync ---------------------------------------------------------------------
    def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        with self._lock:
            result = self.model.load_state_dict(named_tensors, strict=False)
            if self.model.config.tie_word_embeddings:
                self.model.tie_weights()
        if result.unexpected_keys:
            raise KeyError(f"hfcpu: unexpected weight names {result.unexpected_keys[:5]}")
        if global_steps is not None:
            self.global_steps = global_steps
        return len(named_tensors)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # ---- control methods the replica / checkpoint manager call: nothing to do on CPU --------
    async def ready(self) -> bool:
        return True

    async def wake_up(self, tags: list[str] | None = None) -> None:
        pass

    async def sleep(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def wait_for_requests_to_drain(self) -> None:
        pass

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        pass

    async def start_profile(self, **kwargs) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


class HFCPUReplica(RolloutReplica):
    async def launch_servers(self):
        assert self.world_size == 1, "hfcpu: one process per replica (tensor/data/pipeline parallel size 1)"
        name = _server_name(self.replica_rank, self.name_suffix)
        server = (
            ray.remote(HFCPUServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.ready.remote()  # surface constructor errors here
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # only used as the load balancer's server id


class HFCPUServerAdapter(BaseRollout):
    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        cfg = self.config
        rollout_world_size = cfg.tensor_model_parallel_size * cfg.data_parallel_size * cfg.pipeline_model_parallel_size
        rank = int(os.environ["RANK"])
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        self._is_leader = rank % rollout_world_size == 0
        self._server = None

    def _server_handle(self):
        if self._server is None:  # the server starts after the training engine
            self._server = ray.get_actor(_server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int = None, wire_format: str = "named_tensors", **kwargs):
        assert wire_format == "named_tensors", f"hfcpu supports only named_tensors, got {wire_format!r}"
        # Every rank drains the generator: FSDP2's full_tensor() is a collective.
        state: dict[str, torch.Tensor] = {}
        if inspect.isasyncgen(weights) or hasattr(weights, "__aiter__"):
            async for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", copy=True)
        else:
            for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self._is_leader:
            await self._server_handle().update_weights.remote(state, global_steps)
