"""Real models from transformers (tiny configs, random weights, nothing downloaded) through
dse as a user brings them: a recipe folder of a few lines, `recipe check` (capture with
input-free index, mask and position ops folded to constants; frontend steps against
PyTorch), and emulation on goban with 1 and 4 workers, bit-exact on the integer path, the
analytical model agreeing with the emulator."""

from __future__ import annotations

import pytest

from dse.analytical import estimate, summarize
from dse.chips import load_chip, override_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe

transformers = pytest.importorskip("transformers")

DECODER = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=64, vocab_size=64, max_position_embeddings=16, use_cache=False)
# name -> (config class, model class, config); grouped-query attention where the family has it
MODELS = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                                 use_cache=False, bos_token_id=0, eos_token_id=0)),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, ffn_dim=64,
                                               vocab_size=64, max_position_embeddings=16, word_embed_proj_dim=32,
                                               use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=1)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", DECODER),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", DECODER),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(DECODER, sliding_window=None)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(DECODER, head_dim=8)),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4,
                                               intermediate_size=64, vocab_size=64, max_position_embeddings=16,
                                               use_cache=False)),
    "bert": ("BertConfig", "BertModel", dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                            intermediate_size=64, vocab_size=64, max_position_embeddings=16)),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(n_layers=1, dim=32, n_heads=2, hidden_dim=64,
                                                              vocab_size=64, max_position_embeddings=16)),
    "t5_encoder": ("T5Config", "T5EncoderModel", dict(num_layers=1, d_model=32, d_kv=8, num_heads=4, d_ff=64,
                                                     vocab_size=64)),
    "vit": ("ViTConfig", "ViTModel", dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                          intermediate_size=64, image_size=16, patch_size=8, num_channels=3)),
    "resnet": ("ResNetConfig", "ResNetModel", dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                  num_channels=3)),
    "convnext": ("ConvNextConfig", "ConvNextModel", dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                                                        num_channels=3)),
    "regnet": ("RegNetConfig", "RegNetModel", dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                  groups_width=8, num_channels=3)),
    "mobilenet_v2": ("MobileNetV2Config", "MobileNetV2Model", dict(depth_multiplier=0.35, image_size=32,
                                                                  num_channels=3)),
    "swin": ("SwinConfig", "SwinModel", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                            num_heads=[2, 2], window_size=4, num_channels=3)),
    "mobilevit": ("MobileViTConfig", "MobileViTModel", dict(image_size=32, hidden_sizes=[16, 24, 32],
                                                           neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                                                           num_channels=3)),
    # disentangled attention: content-to-position and position-to-content scores
    "deberta_v2": ("DebertaV2Config", "DebertaV2Model", dict(hidden_size=32, num_hidden_layers=1,
                                                            num_attention_heads=2, intermediate_size=64,
                                                            vocab_size=64, max_position_embeddings=16,
                                                            relative_attention=True, pos_att_type=["c2p", "p2c"],
                                                            position_buckets=8, max_relative_positions=16)),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                        intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                                        conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                                                        num_conv_pos_embedding_groups=4)),
}
REDRAW_CONVS = {"mobilevit"}  # models whose own init fades every activation to nothing
TOKENS = "torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))"
PIXELS = "torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))"
INPUTS = {"vit": "torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))",
          **{name: PIXELS for name in ("resnet", "convnext", "regnet", "mobilenet_v2", "swin", "mobilevit")},
          "wav2vec2": "torch.randn(1, 400, generator=torch.Generator().manual_seed(1))"}

RECIPE = '''"""{name}: transformers' {model} from a tiny config, random weights."""
import torch
import transformers


def load():
    torch.manual_seed(0)
    model = transformers.{model}(transformers.{config}(**{kwargs!r})).eval()
    if {redraw_convs}:  # its init (std 0.02) fades every activation to 0: a vacuous comparison
        for layer in model.modules():
            if isinstance(layer, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(layer.weight)
    return model


def inputs():
    return ({inputs},)
'''


def make_recipe(folder, name: str):
    config, model, kwargs = MODELS[name]
    path = folder / name
    path.mkdir()
    (path / "model.py").write_text(RECIPE.format(name=name, model=model, config=config, kwargs=kwargs,
                                                 inputs=INPUTS.get(name, TOKENS), redraw_convs=name in REDRAW_CONVS))
    return path


def check_and_emulate(recipe):
    """`recipe check` passes with a quantized stage; emulation on goban with 1 and 4 workers
    is feasible and bit-exact on the integer path; the model within 2% of the emulator.
    The prepared recipe and the emulated cycles per worker count."""
    prep = prepare_recipe(recipe)  # `recipe check`'s pipeline: prep.pipe
    pipe = prep.pipe
    assert pipe.passed, [(s.name, s.error) for s in pipe.stages if not s.passed]
    assert any(s.quantized for s in pipe.stages)
    chip = load_chip("goban")
    cycles = {}
    for workers in (1, 4):
        cand = Candidate(chip, Mapping(workers=workers))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        assert rep.feasible, rep.reason
        assert rep.verdict.passed and rep.verdict.integer_bit_exact and rep.verdict.integer_tensors > 0, rep.verdict
        model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
        assert model["feasible"]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (workers, model["latency_cycles"], rep.cycles)
        cycles[workers] = rep.cycles
    return prep, cycles


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_transformers_model_checks_and_emulates_bit_exact(tmp_path, name):
    check_and_emulate(make_recipe(tmp_path, name))


MOBILE = '''"""A MobileNet v2 / v3 stage: inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project),
ReLU6 and hardswish, a grouped 3x3 conv, written with torch.nn alone."""
import torch
from torch import nn


def block(c, expand, act):
    hidden = c * expand
    return nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act(),
                         nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                         act(), nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))


class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.Hardswish())
        self.b1, self.b2 = block(16, 2, nn.ReLU6), block(16, 3, nn.Hardswish)
        self.grouped = nn.Conv2d(16, 32, 3, padding=1, groups=4)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.b1(x)
        x = x + self.b2(x)
        x = nn.functional.hardsigmoid(self.grouped(x))
        return self.head(x.mean((2, 3)))


def load():
    torch.manual_seed(0)
    model = Stage()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def inputs():
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
'''


def test_depthwise_and_grouped_convs_check_and_emulate_bit_exact(tmp_path):
    """Grouped convolutions (any `groups`) run as their block-diagonal GEMM on the matrix
    Ball or as a core op, per candidate as the cost decides (`dse.plan.grouped`): on goban
    with one worker the depthwise 3x3 convs (they gather as many elements as they
    multiply) stay on the core and the 4-group conv goes to the Ball; with 4 workers the
    gather is split four ways while the core op is not, so the depthwise ones go too; with
    copies 40x dearer every one stays on the core. Integer and bit-exact either way; the
    model makes the same choice per op and stays within 2% of the emulator."""
    recipe = tmp_path / "mobile"
    recipe.mkdir()
    (recipe / "model.py").write_text(MOBILE)
    prep = prepare_recipe(recipe)
    pipe = prep.pipe
    assert pipe.passed, [(s.name, s.error) for s in pipe.stages if not s.passed]
    grouped = [op for op in prep.graph.ops if op.kind == "conv2d" and op.attrs["groups"] > 1]
    assert len(grouped) == 3 and all(prep.graph.tensors[op.inputs[0]].dtype == "int8" for op in grouped)
    depthwise = {op.name for op in grouped if op.attrs["groups"] == prep.graph.tensors[op.inputs[0]].shape[-1]}
    assert len(depthwise) == 2
    four = next(op.name for op in grouped if op.attrs["groups"] == 4)
    goban = load_chip("goban")
    dear_copies = override_chip(goban, {"cores.op_cycles": {"copy": 160.0}}, "test")
    expected = [(goban, 1, "core", "matrix"), (goban, 4, "matrix", "matrix"),
                (dear_copies, 1, "core", "core"), (dear_copies, 4, "core", "core")]
    for chip, workers, depthwise_on, four_on in expected:
        cand = Candidate(chip, Mapping(workers=workers))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        units = {r.name: r.how for r in rep.lowered.ops}
        assert {units[name] for name in depthwise} == {depthwise_on} and units[four] == four_on, (chip.cores, workers)
        per_op = estimate(prep.graph, [cand])
        model_units = dict(zip(per_op["op"], per_op["unit"]))
        assert all(model_units[op.name] == units[op.name] for op in grouped)
        model = summarize(per_op, [cand]).iloc[0]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.02, (workers, model["latency_cycles"], rep.cycles)
