"""The loop's configuration: :class:`LoopConfig` and the seed ranges each use draws from (the arms: :mod:`envrigger.loop.arms`).

Every range is far from the others, so training, collection, validation, selection and
held-out evaluation never share a seed: held-out ``1_000_000 + i``, selection
(validation levels) ``1_500_000 + i``, collection ``2_000_000``, candidate validation
``3_000_000``, training ``4_000_000`` (a million per round), the transfer gate
``5_000_000_000`` and the credit chunks' scoring ``7_000_000_000``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from envharness.reading import json_kind, parse_json
from envharness.spec import HarnessSpec
from envharness.validated import ValidatedModel
from envrigger.loop.arms import check_arms, registered
from envrigger.loop.learners import LEARNERS
from envrigger.loop.learners.protocol import check_params
from envrigger.structured import AnswerFormat

EVAL_SEED, SELECT_SEED, COLLECT_SEED, VALIDATE_SEED, TRAIN_SEED = 1_000_000, 1_500_000, 2_000_000, 3_000_000, 4_000_000
TRANSFER_SEED = 5_000_000_000  # the transfer gate's levels: 10M per round, 100k per candidate, far above the others
CREDIT_SEED = 7_000_000_000  # the credit chunks' scoring levels: 10M per round, 100k per chunk
LEVELS_APART = 10_000_000_000  # one master seed's level seeds from the next's (levels_per_seed): above every stream's range
# What a run saved before a field existed did, field by field (LoopConfig.saved): no credit before credit chunks, the fork
# before the shadow (the default since 2026-12-06, as one credit chunk and --step-in are), no step-in before it existed.
SAVED_BEFORE: dict[str, Any] = {
    "credit_chunks": 0,
    "credit_baseline": "fork",
    "step_in": False,
    "proposer_format": "text",
    "candidate_timeout_s": 300.0,
    "candidate_max_steps": None,
    "plr_score": "success",  # PLR scored levels by learnability before the published value-loss score (2026-12-07)
}

LEARNER_WRITTEN: dict[str, dict[str, Any]] = {"skills": {"induce_format": "auto"}}
"""A learner's settings written into a new run's ``learner_params`` when not given, so the run resumes with them."""
LEARNER_SAVED_BEFORE: dict[str, dict[str, Any]] = {"skills": {"induce_format": "text"}}
"""What a run saved before :data:`LEARNER_WRITTEN` held a setting went on with (its fresh learners too: added seeds)."""


# Settings both the validator and the loop take: each written once, here, with its bounds, default and help.
MOST_STEPS = 10**12  # env steps of any budget: far above any run, and every count has an upper bound
Share = Annotated[float, Field(ge=0.0, le=1.0)]
BAND = Field((0.2, 0.8), description="the learnability band: a candidate's success interval must lie inside it")
CONFIDENCE = Field(0.9, gt=0.5, lt=1.0, description="confidence of the learnability gate's Wilson interval")
MIN_ROLLOUTS = Field(10, ge=5, le=9_999, description="first learnability batch; grown by half while the interval is undecided")
MAX_ROLLOUTS = Field(80, ge=5, le=9_999, description="learnability rollouts at most; still undecided there is a refusal")
MAX_STEPS = Field(
    10_000_000,
    ge=1,
    le=MOST_STEPS,
    description="env steps one candidate's validation may take (rollouts, reference play, replays, the gates' searches) "
    "before it is refused; a budget in steps, so what is admitted does not depend on the machine's load (null in loop.json, "
    "None in Python: no limit)",
)
TIMEOUT_S = Field(
    None,
    gt=0,
    le=30 * 86_400,
    description="seconds one candidate's validation may take before it is refused; off by default (None), because a "
    "wall-clock limit makes what is admitted depend on the machine's load: the env-step budget bounds validation",
)
REFERENCE_ROLLOUTS = Field(8, ge=1, le=1000, description="reference-solver episodes the integrity, solvability and shortcut gates play")
SOLVABLE_MIN = Field(0.5, ge=0.0, le=1.0, description="share of a candidate's levels the solver (or the search) must win")
SOLVABLE_FRACTION = Field(
    0.5, ge=0.0, le=1.0, description="the solver may instead win this fraction of its own rate on the original env, when that is lower"
)
REGION_MIN_SHARE = Field(0.25, ge=0.0, le=1.0, description="share of a feature-region candidate's levels inside the region")
NOVELTY_SUCCESS_TOL = Field(0.05, ge=0.0, le=1.0, description="success-rate gap within which two envs behave alike (novelty)")
NOVELTY_LENGTH_TOL = Field(0.05, ge=0.0, le=1.0, description="relative mean-length gap within which two envs behave alike (novelty)")
BACKEND = Field("process", max_length=16, description="rollout backend: serial, process or ray")
WORKERS = Field(None, ge=1, le=1024, description="rollout worker processes (default: all cores)")
ROLLOUT_BATCH = Field(
    32,
    ge=1,
    le=4096,
    description="the loop's rollouts (validation and held-out levels, collection, candidate validation) play this many "
    "episodes at once in this process when the learner's policy acts in batches (PPO), one forward pass for all; "
    "the episodes are the ones `backend` stores; 1 always uses `backend`",
)
BACKENDS = ("serial", "process", "ray")


FIX_SAVED = "correct it there, or start a new run"  # how a saved config's problem is fixed: the end of every message about one

RENAMED = {"max_steps": "candidate_max_steps", "timeout_s": "candidate_timeout_s", "batch": "rollout_batch"}
"""ValidationConfig's settings named otherwise before they took LoopConfig's names (2026-12-07)."""


def _not_a_switch(value: Any, info: Any) -> Any:
    """A budget is a number: ``true`` in a hand-edited file would read as 1 (a step, a second) and refuse every candidate."""
    if isinstance(value, bool):
        raise ValueError(f"got {str(value).lower()}; give a number, or null for no limit")
    return value


def _known_backend(value: str) -> str:
    if value not in BACKENDS:
        raise ValueError(f"--backend: got {value!r}; use one of {', '.join(BACKENDS)}")
    return value


class ValidationSettings(ValidatedModel):
    """Every gate threshold and validation budget, each written once: the fields :class:`ValidationConfig` and :class:`LoopConfig` share."""

    band: tuple[Share, Share] = BAND
    confidence: float = CONFIDENCE
    min_rollouts: int = MIN_ROLLOUTS
    max_rollouts: int = MAX_ROLLOUTS
    reference_rollouts: int = REFERENCE_ROLLOUTS
    solvable_min: float = SOLVABLE_MIN
    solvable_fraction: float = SOLVABLE_FRACTION
    region_min_share: float = REGION_MIN_SHARE
    novelty_success_tol: float = NOVELTY_SUCCESS_TOL
    novelty_length_tol: float = NOVELTY_LENGTH_TOL
    candidate_max_steps: int | None = MAX_STEPS
    candidate_timeout_s: float | None = TIMEOUT_S
    backend: str = BACKEND
    workers: int | None = WORKERS
    rollout_batch: int = ROLLOUT_BATCH  # a policy that acts in batches plays this many episodes at once, in this process

    _backend = field_validator("backend")(_known_backend)
    _budgets = field_validator("candidate_max_steps", "candidate_timeout_s", mode="before")(_not_a_switch)


class ValidationConfig(ValidationSettings):
    """Gate thresholds and budgets (see docs/envrigger.md for what each means); :meth:`LoopConfig.validation` makes the loop's.

    Every field is also a :class:`LoopConfig` field of the same name, bounds and default, so
    each is set once, in ``loop.json`` or on the command line (``envrigger run --solvable-min``...).

    Example:
        >>> ValidationConfig(backend="serial").min_rollouts == LoopConfig.model_fields["min_rollouts"].default
        True
        >>> ValidationConfig(min_rollouts=2)
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for ValidationConfig
        min_rollouts
          Input should be greater than or equal to 5 [type=greater_than_equal, input_value=2, input_type=int]
        ...
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt or renamed setting is an error, never a default

    # Equal compute (LoopConfig.validation with budget_counts "all"): candidate_max_steps is a share of the arm's own budget,
    # so rollouts that could carry a validation past it are refused before they are played (episodes x the episode limit).
    _worst_case: bool = PrivateAttr(default=False)

    @property
    def worst_case(self) -> bool:
        """Whether the step budget is held before each batch of rollouts, at its worst case, rather than checked after it."""
        return self._worst_case

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        old = [name for name in RENAMED if isinstance(data, dict) and name in data]
        if old:
            raise ValueError(f"{old[0]} is {RENAMED[old[0]]} now (one name per setting, as in LoopConfig and on the command line)")
        return data


class LoopConfig(ValidationSettings):
    """Everything a loop run needs; saved as ``loop.json`` so ``--resume`` continues the same run.

    The validation settings (:class:`ValidationSettings`) are its fields too, under the same names.
    """

    spec: HarnessSpec
    heldout_spec: HarnessSpec | None = Field(
        None,
        description="held-out levels come from this env instead: the same env id with other level parameters "
        "(e.g. physics outside the training range), no transforms; validation stays on `spec`",
    )
    learner: str = Field(
        "ppo",
        max_length=64,
        description="the learner every arm trains: ppo (Stable-Baselines3, any Box/Discrete/Dict observation), qlearning "
        "(tabular), textq (text games with command slots, e.g. envharness/TextWorld-v0), none (with --agent chat: an LLM "
        "agent the loop plays, reshapes for and evaluates, but does not train), or skills (with --agent chat: an LLM agent "
        "that learns through a skill memory induced from its episodes)",
    )
    learner_params: dict[str, Any] = Field(default_factory=dict, max_length=32)
    arms: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=lambda: ["original", "rigger"],
        max_length=32,
        description="arms trained side by side at equal training steps, each a registered unit (envrigger.loop.arms): "
        "original, original-select, dr, dr-any, plr, accel, plr-random, rigger-noreplay, rigger, and any arm a module registers",
    )
    rounds: int = Field(
        3, ge=1, le=1000, description="rounds of train -> diagnose -> propose -> validate -> admit -> score on validation levels"
    )
    budget_steps: int = Field(
        50_000,
        ge=100,
        le=MOST_STEPS,
        description="env steps per round for each arm: training steps, or every step with --budget-counts all",
    )
    budget_counts: Literal["train", "all"] = Field(
        "train",
        description="what --budget-steps counts: 'train', each arm's training steps (the rigger arm's diagnosis, validation, "
        "credit, searches and setup come on top), or 'all', every env step an arm takes (equal compute: an arm's overhead "
        "is paid from its own training steps, round by round)",
    )
    overhead_share: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="with --budget-counts all: the most of a round's budget the rigger arm's candidate validation may take, "
        "split evenly among its candidates (a candidate past its share is refused: fail closed)",
    )
    reshape_when: Literal["always", "stalled"] = Field(
        "always",
        description="when the rigger arm reshapes: 'always', every round (it trains on its curriculum from the start and "
        "diagnoses, proposes and validates each round), or 'stalled', only once the original env stopped teaching it "
        "(this round's training episodes on the original env did not rise from the first half to the second, or it "
        "mastered them): until it admits a component it trains exactly as the original arm does, and a round in "
        "which the original env still teaches spends nothing on diagnosis or validation",
    )
    collect_episodes: int = Field(
        60,
        ge=5,
        le=9_999,
        description="diagnosis evidence per round: the rigger learner's own last training episodes on the original env, "
        "topped up with fresh ones if fewer",
    )
    eval_episodes: int = Field(200, ge=10, le=100_000, description="held-out episodes (one per held-out level seed), at the end")
    val_episodes: int = Field(100, ge=10, le=100_000, description="validation-level episodes per arm and round, to pick the round")
    candidates_per_round: int = Field(4, ge=1, le=100, description="candidates validated per round")
    dr_pool: int = Field(16, ge=1, le=1000, description="random reshapings per round for the dr arm")
    heldout: bool = Field(
        True,
        description="False: the run ends after picking each arm's round on validation levels, without playing a held-out "
        "level (for choosing variants on validation levels only; benchmarks/variant_check.py)",
    )
    allow_seen_levels: bool = Field(
        False,
        description="run on an env with few levels: held-out seeds may share levels with training (the result says how many)",
    )
    seed: int = Field(0, ge=0, le=10_000, description="master seed")
    plr_score: Literal["value_loss", "success"] = Field(
        "value_loss",
        description="how every PLR buffer (the plr, plr-random and rigger arms') scores a level: value_loss, the published "
        "positive value loss of its latest episode (Jiang et al., 2021; a learner without a value function falls back to "
        "success), or success, learnability p(1-p) of the smoothed success rate",
    )
    levels_per_seed: bool = Field(
        False,
        description="each master seed draws its own held-out, validation and training levels (every level seed moved by "
        "seed x 10^10); off, every master seed plays the same ones and intervals across seeds show learner variance only",
    )
    transfer_steps: int = Field(
        0,
        ge=0,
        le=MOST_STEPS,
        description="with N > 0, the transfer gate: a candidate that passed every other gate is admitted only if a copy of "
        "the learner fine-tuned N steps on the original env and the candidate (half each) then solves more fresh levels "
        "of the original env than a copy fine-tuned N steps on the original env alone; the copies are thrown away, and "
        "their steps count as the rigger arm's `transfer` interaction",
    )
    step_out: bool = Field(
        False,
        description="reverse curriculum: an admitted easing component (a start near the goal or along the walkthrough, "
        "removed walls) that the rigger arm solved on more than the band's top share of its training episodes this round "
        "gets its next rung proposed first (the same easing, less of it), validated like any candidate",
    )
    demo_start: bool = Field(
        False,
        description="reverse curriculum without a search: when the rigger arm won some of its training episodes on the "
        "original env, its first candidate starts along them (DemoStart over up to 20 of its own successes, 0.5-0.9 of each "
        "played as setup), on any env that resets deterministically by seed; validated like any candidate",
    )
    step_in: bool = Field(
        True,
        description="for an agent that wins almost nothing: a candidate easing (a start along the walkthrough, a start near the "
        "goal or a goal near the start) refused at learnability below the band's floor is followed, in the same round, by its rung "
        "nearer the goal, validated like any candidate (at most --candidates of them a round), until a first easing is admitted "
        "(on by default since 2026-12-06; --no-step-in turns it off)",
    )
    retire_mastered: bool = Field(
        False,
        description="an admitted component that the rigger arm solved on more than the band's top share of at least 20 "
        "training episodes in a round sits out the training of every later round (rigger, rigger-noreplay, and the count "
        "plr-random draws); it stays in the library",
    )
    target_all: bool = Field(
        False,
        description="findings the catalog does not name get candidates too: an ending whose condition is a level "
        "parameter's region (`pole_mass <= 0.11`) gets that region's reshapings, and a finding no transform targets "
        "gets the easing ones (a start nearer the goal or along the walkthrough, a nearer goal, fewer walls)",
    )
    mutate: Literal["random", "learnability"] = Field(
        "random",
        description="which admitted components a round mutates (ACCEL-style edits, up to half its candidates): random ones, "
        "or those with the highest learnability p(1 - p) of the round's training wins first",
    )
    credit_chunks: int = Field(
        1,
        ge=0,
        le=20,
        description="credit from the original env: the rigger arm trains each round in N paired chunks; in each, a copy "
        "trained on the original env alone is compared with the curriculum on fresh original-env levels, the worse copy is "
        "thrown away, and each component's (and replay's) share of later training follows its credit; 0 turns it off "
        "(default 1 since 2026-12-06, 2 before)",
    )
    credit_baseline: Literal["fork", "shadow"] = Field(
        "shadow",
        description="what each credit chunk's original-only copy is: fork (the rigger arm's own weights, trained on the "
        "original env alone) or shadow (a learner trained on the original env alone since the run began, on the original "
        "arm's seeds and chunks: where the curriculum loses a chunk the arm falls back to exactly what plain training gives; "
        "with --credit-chunks 1 the original arm trains exactly as without credit; the default since 2026-12-06, fork before)",
    )
    credit_margin: float = Field(
        0.0,
        ge=0.0,
        le=10.0,
        description="the curriculum is thrown away only when its original-only copy solves more of the chunk's scoring levels "
        "by more than this many standard errors of the paired difference (0: by any margin, a tie keeps the curriculum)",
    )
    credit_episodes: int = Field(50, ge=10, le=10_000, description="original-env levels each credit chunk scores both copies on")
    credit_retire: float = Field(
        0.2, gt=0.0, le=1.0, description="a component (or replay) whose summed credit falls to minus this is retired for the run"
    )
    transfer_episodes: int = Field(40, ge=10, le=10_000, description="original-env levels the transfer gate scores both copies on")
    proposer: Literal["catalog", "llm", "both"] = Field(
        "catalog", description="who proposes reshapings: the catalog's rules, a model on an OpenAI-compatible endpoint, or both"
    )
    proposer_base_url: str | None = Field(None, max_length=2048, description="with --proposer llm|both: the endpoint")
    proposer_model: str | None = Field(None, max_length=256, description="with --proposer llm|both: the model")
    proposer_api_key_env: str = Field(
        "OPENAI_API_KEY", max_length=128, description="the variable holding the proposer's API key (never stored)"
    )
    proposer_max_tokens: int = Field(
        2000,
        ge=64,
        le=131_072,
        description="with --proposer llm|both: the longest answer the proposer may give (a small model that rambles stops here)",
    )
    proposer_timeout: float = Field(
        60.0, gt=0.0, le=3600.0, description="with --proposer llm|both: seconds one proposer call may take in all"
    )
    proposer_format: AnswerFormat = Field(
        "auto",
        description="with --proposer llm|both: the response format asked for, the answer's JSON Schema: json_schema "
        "(OpenAI's form; vLLM, Ollama, llama.cpp's llama-server), json_object with a schema (llama-cpp-python's server), "
        "auto (those in turn, the next when the endpoint refuses one) or text (none; the answer is parsed the same)",
    )

    @field_validator("learner")
    @classmethod
    def _known_learner(cls, value: str) -> str:
        if value not in LEARNERS:
            raise ValueError(f"--learner: got {value!r}; use one of {', '.join(LEARNERS)}")
        return value

    _known_arms = field_validator("arms")(check_arms)

    @model_validator(mode="after")
    def _arms_can_run(self) -> LoopConfig:
        arms = registered()
        for name in self.arms:
            arms[name].check(self)  # an arm's own settings (original-select needs credit chunks)
        return self

    @model_validator(mode="after")
    def _heldout_is_the_same_env(self) -> LoopConfig:
        held = self.heldout_spec
        if held is not None and (held.env_id != self.spec.env_id or held.transforms):
            raise ValueError(
                f"heldout_spec: got {held.env_id} with {len(held.transforms)} transform(s); give {self.spec.env_id} "
                "with other env kwargs and no transforms, so held-out levels are judged by the same verifier"
            )
        return self

    @model_validator(mode="after")
    def _learner_params_bounded(self) -> LoopConfig:
        check_params(self.learner, self.learner_params)  # a learner's sizes and counts too, before anything runs
        return self

    @model_validator(mode="after")
    def _learner_settings_written(self) -> LoopConfig:
        written = LEARNER_WRITTEN.get(self.learner, {})
        if any(name not in self.learner_params for name in written):
            self.learner_params = {**written, **self.learner_params}
        return self

    @model_validator(mode="after")
    def _proposer_has_an_endpoint(self) -> LoopConfig:
        if self.proposer != "catalog" and not (self.proposer_base_url and self.proposer_model):
            raise ValueError(f"--proposer {self.proposer} needs --proposer-base-url URL and --proposer-model NAME")
        return self

    @classmethod
    def saved(cls, data: str | dict[str, Any], where: str = "the run's saved config") -> LoopConfig:
        """A config as a run saved it (``loop.json``, ``seeds.json``): a field the file lacks keeps the default it was written under.

        Defaults change (:data:`SAVED_BEFORE`); a run resumed after such a change goes on as it started.
        A field out of its bounds (a hand-edited file) is a one-line ``ValueError`` naming ``where`` and the field.

        Example:
            >>> saved = LoopConfig.saved({"spec": {"env_id": "MiniGrid-DoorKey-6x6-v0"}, "credit_chunks": 2})
            >>> saved.credit_baseline, saved.step_in, LoopConfig(spec=saved.spec).credit_baseline
            ('fork', False, 'shadow')
        """
        fields = parse_json(data, where, dict, FIX_SAVED, ValueError) if isinstance(data, str) else data
        if not isinstance(fields, dict):
            raise ValueError(f"{where}: holds {json_kind(fields)}, not an object; {FIX_SAVED}")
        fields = dict(fields)
        before = LEARNER_SAVED_BEFORE.get(str(fields.get("learner")), {})
        if before and isinstance(fields.get("learner_params", {}), dict):
            fields["learner_params"] = {**before, **fields.get("learner_params", {})}
        try:
            return cls.model_validate({**SAVED_BEFORE, **fields})
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "config"
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{where}: {field}: {message}; {FIX_SAVED}") from None

    @property
    def heldout_base(self) -> HarnessSpec:
        """The env the held-out levels are drawn from: :attr:`heldout_spec`, else :attr:`spec`."""
        return self.heldout_spec or self.spec

    def level(self, first: int) -> int:
        """Where a stream of level seeds that starts at ``first`` (``EVAL_SEED``, ``TRAIN_SEED``...) starts for this master seed.

        Example:
            >>> spec = HarnessSpec(env_id="FrozenLake-v1")
            >>> LoopConfig(spec=spec, seed=3).level(EVAL_SEED), LoopConfig(spec=spec, seed=3, levels_per_seed=True).level(EVAL_SEED)
            (1000000, 30001000000)
        """
        return first + LEVELS_APART * self.seed if self.levels_per_seed else first

    def validation(self) -> ValidationConfig:
        """The validator's settings: this config's fields of the same names (the rollouts at most never below the first batch)."""
        shared = {name: getattr(self, name) for name in ValidationConfig.model_fields}
        if self.budget_counts == "all":  # validation is paid from the arm's budget: each candidate gets its share, at most
            share = max(int(self.overhead_share * self.budget_steps / self.candidates_per_round), 1)
            shared["candidate_max_steps"] = min(share, self.candidate_max_steps or share)
        made = ValidationConfig(**{**shared, "max_rollouts": max(self.max_rollouts, self.min_rollouts)})
        made._worst_case = self.budget_counts == "all"
        return made
