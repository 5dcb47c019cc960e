"""Properties of the podgroup fold over random event sequences (hypothesis).

The reference ``Model`` is written from SEMANTICS.md §5/§6 and docs/storage.md as plain
mutable Python, without the fold's shortcuts (no shared values, no "nothing changed" paths);
the fold must agree with it on every field and derived value after every event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from core_testkit import T0
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    Allocation,
    Annotation,
    Deletion,
    MemberPod,
    PodGroupChange,
    PodGroupPods,
    PodGroupState,
    Preemptibility,
    Release,
    SubGroup,
    Submission,
    evictable_pods,
    fold,
    is_elastic,
)

PODS = ("p0", "p1", "p2", "p3", "p4")
NODES = ("n0", "n1")
SUBGROUPS = ("default", "a", "b")
KEYS = (EXPECTED_RUNTIME_ANNOTATION, REQUEUE_NOT_BEFORE_ANNOTATION, "x")
VALUES = ("1h", "0s", "bad", "2026-11-21T12:00:00Z")


def _times() -> st.SearchStrategy[datetime]:
    # Event times are whatever the cluster says: not necessarily in order.
    return st.integers(0, 600).map(lambda seconds: T0 + timedelta(seconds=seconds))


@st.composite
def submissions(draw: st.DrawFn) -> Submission:
    names = draw(st.lists(st.sampled_from(SUBGROUPS), min_size=1, max_size=3, unique=True))
    subgroups = tuple(SubGroup(name, draw(st.integers(0, 3))) for name in names)
    pods = tuple(
        (pod, draw(st.sampled_from(names)), draw(st.sampled_from([0.5, 1.0, 2.0])))
        for pod in draw(st.lists(st.sampled_from(PODS), min_size=1, max_size=4, unique=True))
    )
    return Submission(
        name=draw(st.sampled_from(["j", "k"])),
        namespace="ns",
        queue=draw(st.sampled_from(["q1", "q2"])),
        node_pool=draw(st.sampled_from([None, "default", "b"])),
        priority=draw(st.integers(0, 3)),
        preemptibility=draw(st.sampled_from(Preemptibility)),
        subgroups=subgroups,
        pods=pods,
        annotations=draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES))),
        at=draw(_times()),
    )


def allocations() -> st.SearchStrategy[Allocation]:
    pairs = st.lists(st.sampled_from(PODS), min_size=1, max_size=3, unique=True).flatmap(
        lambda pods: st.tuples(*(st.tuples(st.just(pod), st.sampled_from(NODES)) for pod in pods))
    )
    return st.builds(Allocation, pairs, _times())


def releases() -> st.SearchStrategy[Release]:
    names = st.none() | st.lists(st.sampled_from(PODS), min_size=1, max_size=3, unique=True).map(
        tuple
    )
    return st.builds(Release, names, _times())


def annotations() -> st.SearchStrategy[Annotation]:
    values = st.none() | st.sampled_from(VALUES)
    return st.builds(Annotation, st.dictionaries(st.sampled_from(KEYS), values, max_size=3))


def changes() -> st.SearchStrategy[PodGroupChange]:
    return st.one_of(
        submissions(),
        allocations(),
        allocations(),
        releases(),
        releases(),
        annotations(),
        st.just(Deletion()),
    )


histories = st.lists(changes(), max_size=12)


@dataclass
class Model:
    """The podgroup rules, written out naively (a mutable record, changed in place)."""

    submitted: bool = False
    spec: tuple[object, ...] | None = None
    subgroups: dict[str, int] = field(default_factory=dict)
    # pod -> [subgroup, gpu, node]
    pods: dict[str, list[object]] = field(default_factory=dict)
    allocated: set[str] = field(default_factory=set)
    start_time: datetime | None = None
    last_start_time: datetime | None = None
    ended_at: datetime | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    submitted_at: datetime | None = None
    deleted: bool = False
    awaiting_release: bool = False
    # The last run ended by an eviction.
    evicted: bool = False

    def fallback(self) -> str:
        if not self.subgroups or "default" in self.subgroups:
            return "default"
        return next(iter(self.subgroups))

    def apply(self, change: PodGroupChange) -> None:
        if isinstance(change, Submission):
            self.submitted = True
            self.spec = (
                change.name,
                change.namespace,
                change.queue,
                change.node_pool or "default",
                change.priority,
                change.preemptibility,
            )
            self.subgroups = {sub.name: sub.min_available for sub in change.subgroups}
            nodes = {pod: spec[2] for pod, spec in self.pods.items()}
            self.pods = {pod: [sub, gpu, nodes.get(pod)] for pod, sub, gpu in change.pods}
            for pod in sorted(self.allocated):
                if pod not in self.pods:
                    self.pods[pod] = [self.fallback(), None, nodes.get(pod)]
            self.annotations.update(change.annotations)
            if self.submitted_at is None:
                self.submitted_at = change.at
        elif isinstance(change, Allocation):
            was_running = bool(self.allocated)
            for pod, node in change.pods:
                if pod in self.pods:
                    self.pods[pod][2] = node
                else:
                    self.pods[pod] = [self.fallback(), None, node]
                self.allocated.add(pod)
            if not was_running:
                self.start_time = self.last_start_time = change.at
                self.ended_at = None
            elif self.allocated:
                self.ended_at = None
        elif isinstance(change, Release):
            names = set(self.allocated) if change.pods is None else set(change.pods)
            released = names & self.allocated
            if released:
                self.allocated -= released
                for pod in released:
                    self.pods[pod][2] = None
                if not self.allocated:
                    self.start_time = None
                    self.ended_at = change.at
                    # Evicted (or requeued): the gang waits to run again.
                    reason = change.reason or ("requeued" if self.awaiting_release else "")
                    self.evicted = (
                        reason in {"evicted", "preempted", "requeued"}
                        or (reason == "deleted" and self.awaiting_release)
                        # The scheduler said who evicted: an eviction whatever the reason.
                        or change.eviction is not None
                    )
            if not self.allocated:
                self.awaiting_release = False
        elif isinstance(change, Annotation):
            for key, value in change.changes.items():
                if value is None:
                    self.annotations.pop(key, None)
                else:
                    self.annotations[key] = value
        else:
            self.deleted = True

    def status(self) -> str:
        if self.deleted:
            return "deleted"
        if self.allocated:
            return "running"
        if self.last_start_time is None or self.evicted:
            return "pending"
        return "finished"

    def elasticity(self) -> tuple[bool, int]:
        if not self.submitted:
            return False, 0
        counts = dict.fromkeys(self.subgroups, 0)
        running = dict(counts)
        for pod, (sub, _, _) in self.pods.items():
            counts[str(sub)] += 1
            running[str(sub)] += pod in self.allocated
        elastic = any(need < counts[name] for name, need in self.subgroups.items())
        if not elastic:
            return False, 0
        return True, sum(max(0, running[n] - need) for n, need in self.subgroups.items())


def assert_agrees(state: PodGroupState, model: Model) -> None:
    assert state.submitted == model.submitted
    if state.spec is None:
        assert model.spec is None
    else:
        spec = state.spec
        fields = (spec.name, spec.namespace, spec.queue, spec.node_pool, spec.priority)
        assert (*fields, spec.preemptibility) == model.spec
        assert {sub.name: sub.min_available for sub in spec.subgroups} == model.subgroups
        assert [sub.name for sub in spec.subgroups] == list(model.subgroups)
    pods = {name: [p.subgroup, p.gpu, state.allocated.get(name)] for name, p in state.pods.items()}
    assert pods == model.pods
    assert state.allocated.keys() <= state.pods.keys()
    assert state.run.allocated == model.allocated
    assert state.run.start_time == model.start_time
    assert state.run.last_start_time == model.last_start_time
    assert state.run.ended_at == model.ended_at
    assert state.annotations == model.annotations
    assert state.submitted_at == model.submitted_at
    assert state.deleted == model.deleted
    assert state.awaiting_release == model.awaiting_release
    assert state.status == model.status()
    assert state.running_pods == len(model.allocated)
    assert state.elasticity() == model.elasticity()
    assert state.stored_awaiting_release == (model.awaiting_release and model.status() == "running")


def run(history: list[PodGroupChange], state: PodGroupState | None = None) -> PodGroupState:
    state = state or PodGroupState("pg")
    for change in history:
        state = fold(state, change)
    return state


def run_then(history: list[PodGroupChange], change: PodGroupChange) -> tuple[PodGroupState, ...]:
    """The state after ``history``, and after ``change`` on top of it."""
    before = run(history)
    return before, fold(before, change)


def waiting(state: PodGroupState) -> PodGroupState:
    """What the requeue worker's commit does to a running podgroup."""
    return state._replace(awaiting_release=True) if state.status == "running" else state


@given(histories, histories)
def test_the_fold_agrees_with_the_reference_model_after_every_event(
    before: list[PodGroupChange], after: list[PodGroupChange]
) -> None:
    state, model = PodGroupState("pg"), Model()
    for change in before:
        state = fold(state, change)
        model.apply(change)
        assert_agrees(state, model)
    # A requeue committed in between (the store sets awaiting_release on a running podgroup).
    state = waiting(state)
    model.awaiting_release = state.awaiting_release
    for change in after:
        state = fold(state, change)
        model.apply(change)
        assert_agrees(state, model)


@given(histories, changes())
def test_folding_is_deterministic_and_leaves_its_input_alone(
    history: list[PodGroupChange], change: PodGroupChange
) -> None:
    state = run(history)
    copy = state._replace(
        pods=dict(state.pods),
        allocated=dict(state.allocated),
        annotations=dict(state.annotations),
    )
    assert run(history) == state
    assert fold(state, change) == fold(state, change)
    assert state == copy


@given(histories, changes())
def test_the_start_time_moves_only_when_a_run_starts_or_ends(
    history: list[PodGroupChange], change: PodGroupChange
) -> None:
    before, after = run_then(history, change)
    if after.run.start_time == before.run.start_time:
        return
    if after.run.start_time is None:
        # A release of the last pod ends the run.
        assert isinstance(change, Release)
        assert before.running_pods > 0
        assert after.running_pods == 0
    else:
        # 0 -> 1+ allocated pods, at the event's own time.
        assert isinstance(change, Allocation)
        assert before.running_pods == 0
        assert after.run.start_time == change.at


@given(histories, _times())
def test_releasing_every_pod_ends_the_run_and_clears_awaiting_release(
    history: list[PodGroupChange], at: datetime
) -> None:
    before = waiting(run(history))
    after = fold(before, Release(None, at))
    assert after.running_pods == 0
    assert after.run.start_time is None
    assert not after.awaiting_release
    assert not after.stored_awaiting_release
    assert after.allocated == {}
    assert after.status in ("pending", "finished", "deleted")
    if before.running_pods:
        assert after.run.ended_at == at
        assert after.run.last_start_time == before.run.start_time
    else:
        assert after.run == before.run


@given(st.lists(allocations(), min_size=1, max_size=4), submissions())
def test_a_placeholders_allocations_survive_the_submission(
    allocated: list[Allocation], submission: Submission
) -> None:
    placeholder = run(list(allocated))
    assert not placeholder.submitted
    state = fold(placeholder, submission)
    listed = {name for name, _, _ in submission.pods}
    declared = [sub.name for sub in submission.subgroups]
    fallback = "default" if "default" in declared else declared[0]
    for name in placeholder.run.allocated:
        pod = state.pods[name]
        assert state.allocated[name] == placeholder.allocated[name]
        if name not in listed:
            assert (pod.subgroup, pod.gpu) == (fallback, None)
    assert state.run == placeholder.run


@given(histories, submissions())
def test_a_submission_replaces_the_spec_and_keeps_the_run(
    history: list[PodGroupChange], submission: Submission
) -> None:
    before, after = run_then(history, submission)
    assert after.run == before.run
    assert after.spec is not None
    assert (after.spec.queue, after.spec.priority) == (submission.queue, submission.priority)
    assert after.submitted_at == (before.submitted_at or submission.at)
    for name, subgroup, gpu in submission.pods:
        assert (after.pods[name].subgroup, after.pods[name].gpu) == (subgroup, gpu)
    assert set(after.pods) == {name for name, _, _ in submission.pods} | before.run.allocated
    assert after.deleted == before.deleted
    for key, value in submission.annotations.items():
        assert after.annotations[key] == value


@given(histories, annotations())
def test_an_annotation_sets_and_none_removes(
    history: list[PodGroupChange], change: Annotation
) -> None:
    before, after = run_then(history, change)
    for key, value in change.changes.items():
        assert after.annotations.get(key) == value
    for key in before.annotations.keys() - change.changes.keys():
        assert after.annotations[key] == before.annotations[key]
    assert after.allocated is before.allocated
    assert after.run == before.run


@given(histories)
def test_running_pods_are_the_allocated_ones_and_hold_a_node(
    history: list[PodGroupChange],
) -> None:
    state = run(history)
    assert state.running_pods == len(state.run.allocated)
    assert state.run.allocated <= state.pods.keys()
    assert state.allocated.keys() == state.run.allocated
    assert (state.status == "running") == (state.running_pods > 0 and not state.deleted)
    assert (state.run.start_time is not None) == (state.running_pods > 0)


@given(histories, changes())
def test_a_change_that_changes_nothing_returns_the_same_state(
    history: list[PodGroupChange], change: PodGroupChange
) -> None:
    state = run(history)
    after = fold(state, change)
    if isinstance(change, Allocation | Release | Deletion) and after == state:
        assert after is state


def test_a_loaded_gpu_may_be_a_decimal() -> None:
    # The store reads numeric as Decimal; the fold keeps it until a submission says otherwise.
    state = PodGroupState("pg", pods={"p0": MemberPod("default", Decimal("0.5"))})
    allocated = fold(state, Allocation((("p0", "n0"),), T0))
    assert allocated.pods["p0"] == MemberPod("default", Decimal("0.5"))
    assert allocated.pods is state.pods


@given(histories)
def test_elasticity_agrees_with_the_podgroup_pods_rules(history: list[PodGroupChange]) -> None:
    state = run(history)
    if state.spec is None or not state.spec.subgroups:
        return
    podgroup = PodGroupPods(
        uid=state.uid,
        pods={name: pod.subgroup for name, pod in state.pods.items()},
        running=frozenset(state.allocated),
        subgroups=state.spec.subgroups,
    )
    assert state.elasticity() == (is_elastic(podgroup), evictable_pods(podgroup, protected=True))
