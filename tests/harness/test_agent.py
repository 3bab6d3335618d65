"""The agent loop: tool steps, grounding, budgets, fallback; and the same loop as an RL environment.

Run: .venv/bin/python -m pytest tests/harness/test_agent.py -q
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from harness.agent import AgentLoop, AppSpec, Final, ModelAccess, ReplyFrame, TurnContext, frame_tokens, render_ids
from harness.budget import Budget
from harness.catalog import Catalog, Item
from harness.env import AppEnv, Episode, Reward
from harness.protocol import Tool, ToolRegistry, render_call
from harness.session import SessionState
from harness.tasks import Task


def _item(i: str, price: float, stock: int, top: str = "Outdoor") -> Item:
    return Item(item_id=i, title=f"thing {i}", category_path=[top, "Gear"], price=price, stock=stock)


CATALOG = Catalog([_item("a", 10, 3), _item("b", 50, 1), _item("sold", 20, 0), _item("k", 5, 9, "Kitchen")])


class FindArgs(BaseModel):
    query: str


class RespondArgs(BaseModel):
    text: str
    item_ids: list[str] = []


class AskArgs(BaseModel):
    question: str


def _find(args: FindArgs, ctx: TurnContext) -> list[dict[str, Any]]:
    return [{"item_id": i.item_id, "title": i.title} for i in ctx.catalog if args.query in i.title]


def _respond(args: RespondArgs, ctx: TurnContext) -> Final:
    return Final(reply=args.text, item_ids=args.item_ids)


def _ask(args: AskArgs, ctx: TurnContext) -> Final:
    return Final(reply=args.question, actions=[{"type": "ask_user"}])


def _fallback(ctx: TurnContext, reason: str) -> Final:
    return Final(reply=f"fallback ({reason})", item_ids=["sold", "a", "ghost"])


def _price_ok(item: Item, c: dict[str, Any]) -> bool:
    return c.get("price_max") is None or (item.price or 0) <= c["price_max"]


def make_app(max_steps: int = 3) -> AppSpec:
    tools = ToolRegistry([Tool("find", "Find items.", FindArgs, _find),
                          Tool("respond", "Answer.", RespondArgs, _respond), Tool("ask_user", "Ask.", AskArgs, _ask)])
    return AppSpec(name="shopping", system_prompt="You sell things.", tools=tools, catalog=CATALOG, fallback=_fallback,
                   item_check=_price_ok, max_steps=max_steps)


def make_loop(scripted: Any, replies: list[str], **kw: Any) -> tuple[AgentLoop, Any]:
    engine = scripted(replies, **kw)
    return AgentLoop(make_app(), ModelAccess(engine=engine, tokenizer=engine.tokenizer)), engine


def test_tool_step_then_grounded_answer(scripted: Any) -> None:
    loop, engine = make_loop(scripted, [render_call("find", {"query": "thing"}),
                                        render_call("respond", {"text": "Try these", "item_ids": ["a", "b"]})])
    session = SessionState(app="shopping")
    result = loop.run_turn(session, "I need a thing")
    assert result.final.item_ids == ["a", "b"] and result.final.reply == "Try these"
    assert not result.degraded and result.steps == 2 and result.tool_calls == 2
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    found = json.loads(session.messages[2]["content"])["result"]
    assert {r["item_id"] for r in found} == {"a", "b", "sold", "k"}
    assert session.shown_items == ["a", "b"] and session.turns == 1
    # the prompt carried the system text and the tool schemas through the real chat template
    text = engine.tokenizer.apply_chat_template([{"role": "system", "content": "You sell things."},
                                                 {"role": "user", "content": "I need a thing"}],
                                                tools=loop.app.tools.schemas(), add_generation_prompt=True,
                                                tokenize=False)
    assert '"name": "find"' in text and "You sell things." in text
    assert engine.calls[0].prompt == render_ids(engine.tokenizer, [{"role": "system", "content": "You sell things."},
                                                                   {"role": "user", "content": "I need a thing"}],
                                                loop.app.tools.schemas())


def test_ungrounded_items_never_reach_the_user(scripted: Any) -> None:
    loop, _ = make_loop(scripted, [
        render_call("respond", {"text": "Buy the ghost!", "item_ids": ["ghost", "a"]}),
        render_call("respond", {"text": "Buy the sold one", "item_ids": ["sold"]}),
        render_call("respond", {"text": "Here", "item_ids": ["a"]}),
    ])
    session = SessionState(app="shopping")
    result = loop.run_turn(session, "show me")
    assert result.final.item_ids == ["a"] and result.grounding_failures == 2
    results = [json.loads(m["content"]) for m in session.messages if m["role"] == "tool"]
    errors = [r["error"] for r in results if not r["ok"]]
    assert results[-1] == {"ok": True, "result": {"sent": True}}
    assert "'ghost' is not in the catalog" in errors[0] and "sold is out of stock" in errors[1]
    assert loop.grounder.failures == {"unknown": 1, "out_of_stock": 1}


def test_request_constraints_are_grounded_too(scripted: Any) -> None:
    loop, _ = make_loop(scripted, [render_call("respond", {"text": "x", "item_ids": ["b"]}),
                                   render_call("respond", {"text": "y", "item_ids": ["a"]})])
    result = loop.run_turn(SessionState(app="shopping"), "cheap please", constraints={"price_max": 20})
    assert result.final.item_ids == ["a"] and loop.grounder.failures == {"constraint": 1}


def test_step_limit_falls_back_with_grounded_items_only(scripted: Any) -> None:
    loop, engine = make_loop(scripted, ["<tool_call>{broken</tool_call>"] * 5)
    session = SessionState(app="shopping")
    result = loop.run_turn(session, "hello")
    assert result.degraded and result.reason == "step_limit" and result.steps == 3 and len(engine.calls) == 3
    assert result.parse_errors == 3
    assert result.final.reply == "fallback (step_limit)" and result.final.item_ids == ["a"]  # sold, ghost dropped
    assert "could not read tool call" in json.loads(session.messages[2]["content"])["error"]
    assert session.messages[-1] == {"role": "assistant", "content": "fallback (step_limit)"}


def test_budget_too_small_for_any_tokens_falls_back_without_calling_the_model(scripted: Any) -> None:
    loop, engine = make_loop(scripted, ["never"], tokens_per_second=10.0)
    # 0.15 s * 10 tok/s = 1 token
    result = loop.run_turn(SessionState(app="shopping"), "hi", budget=Budget(200, reserve_ms=50))
    assert result.degraded and result.reason == "budget" and engine.calls == []


def test_budget_caps_output_tokens_from_measured_speed(scripted: Any) -> None:
    loop, engine = make_loop(scripted, ["Plain answer."], tokens_per_second=100.0)
    result = loop.run_turn(SessionState(app="shopping"), "hi", budget=Budget(1050, reserve_ms=50))
    cap = engine.calls[0].params.max_new_tokens
    assert 95 <= cap <= 100  # (1050 - 50 ms - elapsed) * 100 tok/s
    assert result.final.reply == "Plain answer." and not result.degraded


def test_token_cap_hand_computed() -> None:
    b = Budget(1000, reserve_ms=100, start=0.0)
    b.start = __import__("time").monotonic()
    assert b.token_cap(None, 256) == 256
    assert 88 <= b.token_cap(100.0, 256, prefill_ms=0) <= 90  # (1000 - 100) ms * 100 tok/s = 90
    assert b.token_cap(1000.0, 64) == 64
    with pytest.raises(ValueError):
        Budget(0)


# ------------------------------------------------------------------------------------------------ environment
def _task() -> Task:
    return Task(task_id="t1", app="shopping", kind="multi_turn", messages=[{"role": "user", "content": "a thing"}],
                constraints={"price_max": 20}, hidden={"price_max": 20},
                target={"kind": "set", "slots": [["a"]]})


def _reward(task: Task, final: Final) -> Reward:
    hit = bool(task.target and set(final.item_ids) & set(task.target.item_ids))
    return Reward(1.0 if hit else 0.0, hit, {"hit": float(hit)})


def _user(task: Task, question: str) -> str:
    return f"under {task.hidden['price_max']}"


def _episode(scripted: Any, replies: list[str], *, max_steps: int = 3, max_turns: int = 3) -> tuple[Episode, Any]:
    engine = scripted(replies)
    spec = make_app(max_steps)
    env = AppEnv(spec, _reward, _user, lambda task: {})
    loop = AgentLoop(spec, ModelAccess(engine=engine, tokenizer=engine.tokenizer))
    return Episode(env, loop, _task(), max_turns=max_turns), engine


def test_env_multi_turn_episode_with_simulated_user(scripted: Any) -> None:
    episode, engine = _episode(scripted, [render_call("ask_user", {"question": "Budget?"}),
                                          render_call("find", {"query": "thing"}),
                                          render_call("respond", {"text": "here", "item_ids": ["a"]})],
                               max_steps=5, max_turns=2)
    assert episode.session.messages == [{"role": "user", "content": "a thing"}]
    assert [t["function"]["name"] for t in episode.loop.app.tools.schemas()] == ["find", "respond", "ask_user"]
    assert engine.calls == [] and not episode.done
    result = episode.run()
    assert len(engine.calls) == 3
    assert result.user_replies == ["under 20"]
    roles = [(m["role"], m["content"]) if m["role"] == "user" else m["role"] for m in result.session.messages]
    assert roles[:5] == [("user", "a thing"), "assistant", "tool", "assistant", ("user", "under 20")]
    assert roles[5:7] == ["assistant", "tool"]  # the search's result came back before the answer
    assert result.end == "answered" and result.reward.value == 1.0 and result.reward.success
    assert len(result.turns) == 2 and not result.degraded and result.final.item_ids == ["a"]
    assert episode.done and episode.request() is None  # over: no more model calls


def test_env_grounding_rejection_keeps_episode_going_and_step_limit_ends_it(scripted: Any) -> None:
    episode, engine = _episode(scripted, [render_call("respond", {"text": "x", "item_ids": ["ghost"]}),
                                          "<tool_call>oops"], max_steps=2)
    first = episode.request()
    assert first is not None
    episode.apply(engine.generate([first])[0][0])
    assert not episode.done and episode.turn.result.grounding_failures == 1
    result = episode.run()
    turn = result.turns[-1]
    # the step cap is per turn: the app's fallback answers (grounded items only), flagged degraded
    assert result.degraded and turn.reason == "step_limit" and turn.parse_errors == 1 and turn.steps == 2
    assert result.final.reply == "fallback (step_limit)" and result.final.item_ids == ["a"]
    assert result.end == "answered" and len(engine.calls) == 2


def test_env_plain_text_is_a_final_answer(scripted: Any) -> None:
    episode, _ = _episode(scripted, ["I cannot help."])
    result = episode.run()
    assert result.end == "answered" and result.reward.value == 0.0 and not result.degraded
    assert result.final.reply == "I cannot help."


def test_fit_prompt_keeps_system_tools_and_first_user_and_drops_the_oldest(chat_tokenizer: Any) -> None:
    from harness.agent import fit_prompt, render_ids

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "FIRST " * 5}]
    for k in range(3):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "find", "arguments": "{}"}}
        msgs += [{"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}", "name": "find", "content": f"RESULT{k} " * 20}]
    msgs.append({"role": "user", "content": "LATEST"})
    system = {"role": "system", "content": "SYS"}
    full = render_ids(chat_tokenizer, [system, *msgs], None)
    assert fit_prompt(chat_tokenizer, "SYS", msgs, [], len(full)) == full  # fits: unchanged
    # one token too many: the oldest exchange goes, the call together with its result
    assert fit_prompt(chat_tokenizer, "SYS", msgs, [], len(full) - 1) == render_ids(
        chat_tokenizer, [system, msgs[0], *msgs[3:]], None)
    minimal = render_ids(chat_tokenizer, [system, msgs[0], msgs[-1]], None)
    assert fit_prompt(chat_tokenizer, "SYS", msgs, [], len(minimal)) == minimal
    assert fit_prompt(chat_tokenizer, "SYS", msgs, [], len(minimal) - 1) is None  # the loop falls back


def test_for_model_puts_a_user_note_after_the_words() -> None:
    from harness.agent import for_model

    plain = {"role": "user", "content": "hi"}
    noted = {"role": "user", "content": "price?", "note": "on screen: #2 lamp", "name": "v"}
    out = for_model([plain, noted, {"role": "user", "content": "x", "note": ""}])
    assert out[0] is plain  # no note: the same message
    assert out[1] == {"role": "user", "content": "price?\n[on screen: #2 lamp]", "name": "v"}
    assert out[2] == {"role": "user", "content": "x", "note": ""}  # an empty note adds nothing
    assert noted["content"] == "price?"  # the session's message is not changed


def test_sids_written_as_text_are_grounded_items_and_cut_from_the_reply(scripted: Any) -> None:
    import numpy as np

    from harness.agent import Grounder
    from sid.codebook import SidMap

    sid_map = SidMap(["a", "b", "sold", "k"], np.array([[0, 0], [0, 1], [1, 0], [2, 0]]))
    engine = scripted(["Try <s1_0><s2_0> or <s1_0><s2_1> <s1_1><s2_0> <s1_9><s2_9>", "<s1_2><s2_0>", "<s1_1><s2_0>",
                       "</tool_call>", '{"name": 10}} {"name": 90}}'])
    app = make_app()
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=engine.tokenizer),
                     Grounder(CATALOG, sid_map, _price_ok))
    first = loop.run_turn(SessionState(app="shopping"), "cheap things", constraints={"price_max": 20})
    # a (10) passes; b is over the price cap, sold is out of stock, <s1_9><s2_9> names nothing: 3 failures
    assert first.final.item_ids == ["a"] and first.final.reply == "Try or" and first.grounding_failures == 3
    assert not first.degraded
    only_sid = loop.run_turn(SessionState(app="shopping"), "a knife")
    assert only_sid.final.item_ids == ["k"] and only_sid.final.reply == "Here is what I found."
    nothing = loop.run_turn(SessionState(app="shopping"), "the sold one")  # only an ungrounded SID: nothing to show
    assert nothing.degraded and nothing.reason == "empty_reply" and "sold" not in nothing.final.item_ids
    stray = loop.run_turn(SessionState(app="shopping"), "a lamp")  # a lone protocol tag is nothing to read either
    assert stray.degraded and stray.reason == "empty_reply" and "tool_call" not in stray.final.reply
    broken = loop.run_turn(SessionState(app="shopping"), "a lamp")  # a call's broken JSON as text: no answer
    assert broken.degraded and broken.reason == "empty_reply" and "name" not in broken.final.reply


# ------------------------------------------------------------------------------------------------ the reply frame
class _PieceTokenizer:
    """Greedy longest match over a fixed list of pieces (ids = their index), so token boundaries are hand-known."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        ids, i = [], 0
        while i < len(text):
            k = max((k for k, p in enumerate(self.pieces) if text.startswith(p, i)), key=lambda k: len(self.pieces[k]))
            ids.append(k)
            i += len(self.pieces[k])
        return {"input_ids": ids}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(self.pieces[i] for i in ids)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.pieces[i] for i in ids]

    def __len__(self) -> int:
        return len(self.pieces)


PIECES = ["<", "call", ">", "{", '"', "a", "b", "}", "}}", '{"a', ": ", "x", "y", "/"]


def test_frame_tokens_force_the_start_only_up_to_a_boundary_every_reply_shares() -> None:
    tok = _PieceTokenizer(PIECES)
    frame = ReplyFrame(start='<call>{"', stop="}}", end="</call>", probes=('a": x}}', 'b": y}}'))
    # '<call>{"' alone is < call > { " (ids 0 1 2 3 4); followed by 'a' the tokenizer writes '{"a' (id 9) instead,
    # so only '<call>' (ids 0 1 2) is a prefix of every reply's tokens
    ft = frame_tokens(tok, frame)
    assert ft.ids == [0, 1, 2] and ft.text == "<call>"
    assert ft.end_ids == [0, 13, 1, 2] and ft.stop == "}}"
    # without the probe that merges, the whole start is forced
    whole = frame_tokens(tok, ReplyFrame(start='<call>{"', stop="}}", probes=('b": y}}',)))
    assert whole.ids == [0, 1, 2, 3, 4] and whole.text == '<call>{"'


# a call's pieces: ' "#' makes ' "' extendable (the value "#3" merges with its opening quote), as in SmolLM2's BPE
CALL_PIECES = ["<c>", '{"', "item", "fact", '":', ' "', ' "#', "3", "this", '",', '"', "}}", "price", "pr", "ice",
               "chat", "ch", "at", "versus", "x", " ", "un", "known"]
CALL_FRAME = ReplyFrame(start='<c>{"', stop="}}", probes=('item": "this", "fact": "price"}}', 'fact": "chat"}}',
                                                          'item": "#3", "fact": "price", "versus": "this"}}'),
                        jumps=((r"^(?:item|fact)", '": "'), (r'item": "[^"]*",', ' "fact": "'),
                               (r'fact": "[^"]*",', ' "versus": "'), (r'(?:fact|versus)": "[^"]*"', "}}")),
                        choices=((r'fact": "([^"]+)', ("price", "chat", "unknown")),))


def test_frame_jumps_force_the_fixed_runs_the_way_the_whole_reply_tokenizes() -> None:
    tok = _PieceTokenizer(CALL_PIECES)
    ft = frame_tokens(tok, CALL_FRAME)
    assert ft.ids == [0, 1] and ft.jump is not None
    jump = ft.jump
    ids = {p: i for i, p in enumerate(CALL_PIECES)}

    def tokens(*pieces: str) -> list[int]:
        return [ids[p] for p in pieces]

    # after the key: '":' is forced, ' "' is left to the model (' "#' starts with it: the value may merge into it)
    assert jump(tokens("item")) == tokens('":')
    # after the item's value: ' "fact": "' minus its open quote
    assert jump(tokens("item", '":', ' "', "this", '",')) == tokens(' "', "fact", '":')
    assert jump(tokens("item", '":', ' "#', "3", '",', ' "', "fact", '":', ' "', "price", '",')) == \
        tokens(' "', "versus", '":')
    # a value's closing quote: '}}' completes the stop string, so it is forced whole
    assert jump(tokens("fact", '":', ' "', "price", '"')) == tokens("}}")
    # a value of the closed set once its start names one: 'un' -> 'known'; but 'price' is one token, so a model that
    # wrote 'pr' is off the way the value tokenizes: nothing forced
    assert jump(tokens("fact", '":', ' "', "un")) == tokens("known")
    assert jump(tokens("fact", '":', ' "', "pr")) == []
    # nothing fixed follows inside a value
    assert jump(tokens("item", '":', ' "')) == [] and jump(tokens("item", '":', ' "', "this")) == []
    # tokens that are not how their text tokenizes ('pr' 'ice' is 'price'): no jump after them
    assert jump(tokens("fact", '":', ' "', "pr", "ice", '"')) == []
    # the probes' tokens per chosen token: 12 in 7 (item ' "' this '",' ' "' price '"'), 6 in 4 (fact ' "' chat '"'),
    # 18 in 10 (item ' "#' 3 '",' ' "' price '",' ' "' this '"'): the fewest, 1.5, turns budget steps into tokens
    assert ft.tokens_per_step == pytest.approx(min(12 / 7, 6 / 4, 18 / 10))


def test_frame_jumps_that_break_a_probe_are_turned_off() -> None:
    import dataclasses

    tok = _PieceTokenizer(CALL_PIECES)
    wrong = dataclasses.replace(CALL_FRAME, jumps=((r"^item", '": x'),))  # the probes go on '": "', not '": x'
    ft = frame_tokens(tok, wrong)
    assert ft.ids == [0, 1] and ft.jump is None and ft.tokens_per_step == 1.0


def test_greedy_turns_carry_the_frame_jumps_and_a_token_cap_of_more_tokens_per_step(scripted: Any) -> None:
    import dataclasses

    from harness.agent import LoopConfig

    app = dataclasses.replace(make_app(), reply_frame=CALL_FRAME)
    ft = frame_tokens(_PieceTokenizer(CALL_PIECES), CALL_FRAME)
    assert ft.jump is not None and ft.tokens_per_step == 1.5
    caps = {}
    for temperature in (0.0, 1.0):
        engine = scripted(["unused"], tokens_per_second=100.0)  # 100 decode steps per second, no prefill cost
        loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=engine.tokenizer),
                         config=LoopConfig(temperature=temperature, max_new_tokens=1000))
        loop._frame = ft  # the frame as this tokenizer-free test built it
        request = loop.begin(SessionState(app="shopping"), "hi", budget=Budget(1000.0, reserve_ms=0.0)).request()
        assert request is not None
        assert request.jump is (ft.jump if temperature == 0.0 else None)  # sampling (RL rollouts) decodes every token
        caps[temperature] = request.params.max_new_tokens
    # ~1 s left at 100 steps/s: ~100 steps; greedy with the jumps writes 1.5 tokens per step
    assert 97 <= caps[1.0] <= 100 and int(97 * 1.5) <= caps[0.0] <= 150


class _FrameEngine:
    """Writes a fixed continuation after the prompt and stops at the stop string as a real engine does."""

    def __init__(self, tokenizer: Any, continuation: str) -> None:
        self.tokenizer, self.continuation = tokenizer, continuation
        self.calls: list[Any] = []
        self.tokens_per_second = None

    def generate(self, requests: list[Any]) -> list[list[Any]]:
        from infra.engines.base import Completion

        self.calls += requests
        out = []
        for r in requests:
            stop = r.params.stop[0] if r.params.stop else None
            text = self.continuation
            reason = "eos"
            if stop is not None and stop in text:
                text, reason = text[:text.index(stop)], "stop"
            ids = self.tokenizer(self.continuation[:len(text) + (len(stop) if reason == "stop" and stop else 0)]
                                 )["input_ids"]
            out.append([Completion(request_id=r.request_id, index=0, token_ids=ids, text=text,
                                   logprobs=[0.0] * len(ids), finish_reason=reason, prompt_tokens=len(r.prompt),
                                   latency_ms=1.0, weights_version=0)])
        return out


def test_a_framed_reply_is_read_whole_and_its_closing_kept_in_the_token_context(chat_tokenizer: Any) -> None:
    import dataclasses

    start = render_call("respond", {"text": "x"})[:render_call("respond", {"text": "x"}).index('text"')]
    frame = ReplyFrame(start=start, stop="}}", end="\n</tool_call>", probes=('text": "hi"}}',))
    app = dataclasses.replace(make_app(), reply_frame=frame)
    engine = _FrameEngine(chat_tokenizer, 'text": "ok then", "item_ids": ["a"]}}\n</tool_call>')
    loop = AgentLoop(app, ModelAccess(engine=engine, tokenizer=chat_tokenizer))  # type: ignore[arg-type]
    session = SessionState(app="shopping")
    result = loop.run_turn(session, "anything")
    assert not result.degraded and result.final.reply == "ok then" and result.final.item_ids == ["a"]
    request = engine.calls[0]
    forced = frame_tokens(chat_tokenizer, frame).ids
    assert forced and request.prompt[-len(forced):] == forced  # the opening is in the prompt, not generated
    assert request.params.stop == ("}}",)
    # the session's token context: prompt (with the opening) + what was generated + the closing the model never
    # wrote + eos, so the next turn's prompt holds the whole call
    context = session.context
    assert context is not None
    closing = chat_tokenizer("\n</tool_call>", add_special_tokens=False)["input_ids"]
    assert context.ids[-len(closing) - 1:-1] == closing and context.ids[-1] == chat_tokenizer.eos_token_id
    # an empty completion stays an empty reply (the fallback answers), not a broken call
    empty = AgentLoop(app, ModelAccess(engine=_FrameEngine(chat_tokenizer, ""), tokenizer=chat_tokenizer))  # type: ignore[arg-type]
    assert empty.run_turn(SessionState(app="shopping"), "anything").reason == "empty_reply"

