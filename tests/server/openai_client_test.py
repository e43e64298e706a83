"""The official openai client against a `chronos serve` this test starts, as an agent or editor uses it.

At temperature 0 each of 8 concurrent requests (completions and chat, streamed and not) gets the text
`chronos generate` gives its prompt alone, resident and with the experts streamed from the GGUF file at
a 25% cache in wait mode; the client's own errors come back for a wrong key, an unknown model and a bad
request; a whole conversation turn reuses the KV of the one before. Every wait has a deadline.

    build/client-venv/bin/python3 tests/server/openai_client_test.py --chronos build/release/chronos \
        --model tests/fixtures/gguf/mixtral-f32.gguf
"""

import argparse
import concurrent.futures
import re
import subprocess
import sys
import time

import openai

KEY = "test-key"
PROMPTS = [
    "The river keeps its own time, and the",
    "Once upon a time",
    "In the beginning the mill",
    "A",
    "The old mill stood by the water and the wheel turned slowly",
    "Tell me",
    "The river",
    "Water and stone",
]
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def generate(args, prompt, n, chat):
    cmd = [args.chronos, "generate", "-m", args.model, "-p", prompt, "-n", str(n), "--temp", "0"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, capture_output=True, timeout=120, check=True)
    return out.stdout.decode("utf-8")


class Server:
    """chronos serve on a free port, stopped with SIGINT at the end."""

    def __init__(self, args, extra):
        cmd = [args.chronos, "serve", "-m", args.model, "--port", "0", "--parallel", "4", "--max-queue", "8",
               "--api-key", KEY, "-c", "256"] + extra
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        self.port = None
        self.log = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"serving '.*' on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise SystemExit("chronos serve did not start:\n" + "".join(self.log))

    def client(self, key=KEY):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key, timeout=60, max_retries=0)

    def stop(self):
        self.proc.send_signal(2)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise SystemExit("chronos serve did not stop within 30 s of SIGINT")
        check(rc == 0, f"serve exited {rc}")


def one(client, i, model):
    """Request i: even ones completions, odd ones chat; every second pair streamed."""
    n = 6 + i % 5
    stream = (i // 2) % 2 == 1
    if i % 2 == 0:
        if stream:
            text = "".join(c.choices[0].text for c in client.completions.create(
                model=model, prompt=PROMPTS[i], max_tokens=n, temperature=0, stream=True))
        else:
            r = client.completions.create(model=model, prompt=PROMPTS[i], max_tokens=n, temperature=0)
            check(r.usage.completion_tokens == n, f"request {i}: {r.usage.completion_tokens} tokens, not {n}")
            check(r.choices[0].finish_reason == "length", f"request {i}: finish {r.choices[0].finish_reason}")
            text = r.choices[0].text
    else:
        messages = [{"role": "user", "content": PROMPTS[i]}]
        if stream:
            text = ""
            usage = None
            for c in client.chat.completions.create(model=model, messages=messages, max_tokens=n, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}):
                if c.usage is not None:
                    usage = c.usage
                if c.choices and c.choices[0].delta.content:
                    text += c.choices[0].delta.content
            check(usage is not None and usage.completion_tokens == n, f"request {i}: streamed usage {usage}")
        else:
            r = client.chat.completions.create(model=model, messages=messages, max_tokens=n, temperature=0)
            check(r.choices[0].message.role == "assistant", f"request {i}: role {r.choices[0].message.role}")
            text = r.choices[0].message.content
    return text


def run_eight(args, server, expected, label):
    client = server.client()
    model = client.models.list().data[0].id
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: one(client, i, model), range(8)))
    for i in range(8):
        check(got[i] == expected[i], f"{label}: request {i}: {got[i]!r} != generate's {expected[i]!r}")


def errors(server):
    model = server.client().models.list().data[0].id
    try:
        server.client("wrong").models.list()
        check(False, "a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    try:
        server.client().completions.create(model="no-such-model", prompt="A", max_tokens=1)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError as e:
        check("no-such-model" in str(e), f"the error does not name the model: {e}")
    try:
        server.client().completions.create(model=model, prompt="A", max_tokens=1, n=2)
        check(False, "n = 2 was accepted")
    except openai.BadRequestError as e:
        check("'n'" in str(e), f"the error does not name the field: {e}")


def conversation(server):
    """A second turn resends the first turn and its reply: most of its prompt is reused."""
    client = server.client()
    model = client.models.list().data[0].id
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "The old mill?"}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And the river?"}]
    second = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    check(cached >= first.usage.prompt_tokens - 1,
          f"the second turn reused {cached} tokens; the first turn's prompt was {first.usage.prompt_tokens}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chronos", required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    expected = [generate(args, PROMPTS[i], 6 + i % 5, chat=i % 2 == 1) for i in range(8)]
    for label, extra in [("resident", []), ("streamed at 25%, wait", ["--expert-cache", "25%", "--on-miss", "wait"])]:
        server = Server(args, extra)
        try:
            run_eight(args, server, expected, label)
            if label == "resident":
                errors(server)
                conversation(server)
        finally:
            server.stop()
    if FAILURES:
        print(f"{len(FAILURES)} failures", file=sys.stderr)
        return 1
    print("ok: 8 concurrent requests equal generate, resident and streamed; errors; prefix reuse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
