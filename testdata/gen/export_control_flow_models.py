#!/usr/bin/python3
"""Export the control-flow test models (testdata/models/control_flow/*.onnx).

Run from the repository root with the Debian python (python3-torch, python3-onnx):

    /usr/bin/python3 testdata/gen/export_control_flow_models.py

Both models are torch.jit.script'ed so that Python control flow on tensor values survives
export as ONNX Loop/If nodes (tracing would unroll it for one input):
  - greedy_decode.onnx: a greedy decoding loop over a tiny recurrent cell; the number of
    steps is an input, and the tokens are collected in a list (a sequence in ONNX);
  - branch_on_sum.onnx: an `if` on the sign of a tensor's sum picks one of two small MLPs.
Fixed seeds and tiny sizes keep the files small and the export deterministic.
"""
import os

import onnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "models", "control_flow"))
OPSET = 13
VOCAB, HIDDEN = 11, 8


class GreedyDecode(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.input_proj = nn.Linear(HIDDEN, HIDDEN)
        self.state_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, h: torch.Tensor, token: torch.Tensor, steps: torch.Tensor):
        tokens = []
        for _ in range(int(steps)):
            h = torch.tanh(self.input_proj(self.embed(token)) + self.state_proj(h))
            token = self.head(h).argmax(-1)
            tokens.append(token)
        return torch.stack(tokens, 0), h


class BranchOnSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Linear(6, 6)
        self.neg = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor):
        if bool(x.sum() > 0):
            y = torch.relu(self.pos(x))
        else:
            y = self.neg(x) * 2.0
        return y


def export(module, args, names_in, names_out, file, dynamic_axes=None):
    scripted = torch.jit.script(module)
    path = os.path.join(OUT_DIR, file)
    torch.onnx.export(scripted, args, path, opset_version=OPSET, input_names=names_in,
                      output_names=names_out, dynamic_axes=dynamic_axes)
    model = onnx.load(path)
    model.producer_name = "fusectl testdata/gen/export_control_flow_models.py"
    model.producer_version = ""
    onnx.checker.check_model(model)
    onnx.save(model, path)
    print(path, os.path.getsize(path), "bytes:",
          sorted({n.op_type for n in model.graph.node}))


def write_empty_optional_models():
    # libonnx 1.12's text parser has no syntax for a type-valued attribute, which an empty
    # Optional needs, so these two are built with the onnx helper instead.
    from onnx import TensorProto, helper
    float_type = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    def model(name, outputs, nodes):
        graph = helper.make_graph(
            [helper.make_node("Optional", [], ["none"], type=float_type)] + nodes, name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], outputs)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        path = os.path.join(OUT_DIR, name + ".onnx")
        onnx.save(m, path)
        print(path, os.path.getsize(path), "bytes")
    model("empty_optional_has", [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                                 helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
          [helper.make_node("OptionalHasElement", ["none"], ["has"]),
           helper.make_node("Identity", ["x"], ["y"])])
    model("empty_optional_get", [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
          [helper.make_node("OptionalGetElement", ["none"], ["y"])])


def write_sequence_output_model():
    # Outputs that are not tensors, as `fusectl run` prints and writes them: a sequence of two
    # tensors of different shapes and an empty optional.
    from onnx import TensorProto, helper
    float_type = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
         helper.make_node("Optional", [], ["none"], type=float_type)],
        "sequence_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None),
         helper.make_value_info("none", helper.make_optional_type_proto(float_type))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    path = os.path.join(OUT_DIR, "sequence_out.onnx")
    onnx.save(m, path)
    print(path, os.path.getsize(path), "bytes")


def main():
    write_empty_optional_models()
    write_sequence_output_model()
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.manual_seed(1)
    decoder = GreedyDecode().eval()
    export(decoder, (torch.zeros(2, HIDDEN), torch.tensor([1, 2]), torch.tensor(4)),
           ["h", "token", "steps"], ["tokens", "h_final"], "greedy_decode.onnx",
           {"tokens": {0: "steps_taken"}})
    torch.manual_seed(2)
    branch = BranchOnSum().eval()
    export(branch, (torch.ones(3, 6),), ["x"], ["y"], "branch_on_sum.onnx")


if __name__ == "__main__":
    main()
