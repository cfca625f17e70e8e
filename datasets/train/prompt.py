"""prompt.py - the RAG prompt as token ids, built exactly as model/prompt.c
builds it (LZ_PROMPT_LLAMA3 style), so training sees what lazyingest and
lazyquery feed the model:

  prefix   = BOS <|start_header_id|>system<|end_header_id|> "\\n\\n" SYSTEM <|eot_id|>
             <|start_header_id|>user<|end_header_id|> "\\n\\n"
  document = "Document: " title "\\n" text "\\n\\n"            (tokenized standalone)
  question = "Question: " q <|eot_id|> <|start_header_id|>assistant<|end_header_id|> "\\n\\n"
  answer   = answer text <|eot_id|>                            (what the model generates)

The strings (SYSTEM, "Document: ", "\\n\\n", "Question: ") are read from
model/prompt.h, the one definition; datasets/tools/prompt_check.c and
`train.py --check-prompt` compare these ids with the C builder's."""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROMPT_H = os.path.join(ROOT, "model", "prompt.h")


def _c_string_defines(path):
    """{NAME: value} of '#define NAME "..." "..."' lines (with backslash continuations)."""
    src = open(path, encoding="utf-8").read().replace("\\\n", " ")
    out = {}
    for m in re.finditer(r'^#define\s+(\w+)\s+((?:"(?:[^"\\]|\\.)*"\s*)+)', src, re.M):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        out[m.group(1)] = "".join(parts).encode("latin-1", "backslashreplace").decode("unicode_escape")
    return out


_D = _c_string_defines(PROMPT_H)
SYSTEM = _D["LZ_PROMPT_SYSTEM"]
DOC_HEAD = _D["LZ_PROMPT_DOC_HEAD"]
DOC_SEP = _D["LZ_PROMPT_DOC_SEP"]
QUESTION = _D["LZ_PROMPT_QUESTION"]
FINAL = _D["LZ_PROMPT_FINAL"]


def final_answer(text):
    """The answer a generated text gives: what follows the last final-answer marker
    (lz_prompt_final_answer in model/prompt.c), else the whole text."""
    i = text.rfind(FINAL)
    return (text[i + len(FINAL):] if i >= 0 else text).strip()


def answer_text(answer, reasoning=None):
    """What the model is trained to generate: the answer, or reasoning + marker + answer."""
    return answer if not reasoning else reasoning + FINAL + answer


class Prompt:
    def __init__(self, tok):
        self.tok = tok
        sp = tok.special
        self.bos, self.start, self.end, self.eot = (sp["<|begin_of_text|>"], sp["<|start_header_id|>"],
                                                    sp["<|end_header_id|>"], sp["<|eot_id|>"])
        e = tok.encode
        self.prefix = ([self.bos, self.start] + e("system") + [self.end] + e("\n\n" + SYSTEM) +
                       [self.eot, self.start] + e("user") + [self.end] + e("\n\n"))
        self.cue = [self.eot, self.start] + e("assistant") + [self.end] + e("\n\n")

    def doc(self, title, text):
        head = DOC_HEAD + title if title else DOC_HEAD.rstrip(" ")
        return self.tok.encode(head + "\n" + text + DOC_SEP)

    def question(self, q):
        return self.tok.encode(QUESTION + q) + self.cue

    def answer(self, a):
        return self.tok.encode(a) + [self.eot]
