// Row-wise kernels: runs of consecutive row-wise nodes (OpDef::fusion Elementwise or RowReduce) over one [R, C]
// shape become one generated vector kernel (kernels/rowwise.h), each node adding its part through its
// OpDef::rowwise function; operands are group values, constants (broadcast by period) or stored inputs.
#include <algorithm>
#include <set>
#include <stdexcept>

#include "lowering.h"

namespace tpusim::compiler {

bool Lowering::rowwise_op(const ir::Node& n) const {
  const OpDef* def = find_op(n.op);
  return def && def->row_wise() && def->rowwise && (!def->fusable || def->fusable(*this, n));
}

KernelCall Lowering::rowwise_call(const std::string& label, int64_t rows, int64_t cols) {
  KernelCall call;
  call.kind = KernelCall::Kind::Rowwise;
  call.label = label;
  call.kernel = "rowwise";
  call.rows.rows = rows;
  call.rows.cols = cols;
  return call;
}

int Lowering::rw_node(KernelCall& call, rw::Op op, std::vector<int> args, float value, float lo, float hi) {
  rw::Node nd;
  nd.op = op;
  nd.args = std::move(args);
  nd.value = value;
  nd.lo = lo;
  nd.hi = hi;
  call.rows.nodes.push_back(nd);
  return static_cast<int>(call.rows.nodes.size()) - 1;
}

bool Lowering::rowwise_fits(const rw::Program& p) const {
  try {
    kernels::rowwise::plan(p, opts_.target.symbols);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

int Lowering::rw_input(KernelCall& call, Stored s, bool per_row, int64_t period, int64_t stride) {
  for (size_t i = 0; i < call.row_inputs.size(); ++i)
    if (call.row_inputs[i] == s.buf && call.row_input_offs[i] == s.off && call.rows.inputs[i].per_row == per_row &&
        call.rows.inputs[i].period == period && call.rows.inputs[i].stride == stride)
      for (size_t k = 0; k < call.rows.nodes.size(); ++k)
        if (call.rows.nodes[k].op == rw::Op::Input && call.rows.nodes[k].input == static_cast<int>(i))
          return static_cast<int>(k);
  rw::Input in;
  in.addr = 0;
  in.dtype = s.dtype;
  in.per_row = per_row;
  in.period = period;
  in.stride = stride;
  call.rows.inputs.push_back(in);
  call.row_inputs.push_back(s.buf);
  call.row_input_offs.push_back(s.off);
  call.tensors["in" + std::to_string(call.row_inputs.size())] = s.buf;
  rw::Node nd;
  nd.op = rw::Op::Input;
  nd.input = static_cast<int>(call.rows.inputs.size()) - 1;
  call.rows.nodes.push_back(nd);
  return static_cast<int>(call.rows.nodes.size()) - 1;
}

void Lowering::rw_output(KernelCall& call, int node, Stored s) {
  call.rows.outputs.push_back(rw::Output{node, 0, s.dtype});
  call.row_outputs.push_back(s.buf);
  call.row_output_offs.push_back(s.off);
  call.tensors["out" + std::to_string(call.row_outputs.size())] = s.buf;
}

Shape Lowering::physical(const Group& gr, Shape s) const {
  while (s.size() < gr.O.size()) s.insert(s.begin(), 1);
  if (gr.nhwc && s.size() == 4) s = {s[0], s[2], s[3], s[1]};
  return s;
}

Shape Lowering::main_shape(const ir::Node& n) const {
  if (find_op(n.op)->fusion == Fusion::RowReduce) return shape(n.inputs[0]);
  return shape(n.outputs[0]);
}

void Lowering::lower_rowwise(int first) {
  const ir::Node& n0 = g_.nodes[first];
  Group gr;
  Shape m = main_shape(n0);
  bool has_reduce = false;
  // Collect the run: consecutive row-wise nodes of one shape.
  std::vector<int> run;
  for (size_t i = static_cast<size_t>(first); i < g_.nodes.size(); ++i) {
    if (done_[i]) continue;
    const ir::Node& n = g_.nodes[i];
    if (!rowwise_op(n)) break;
    if (!run.empty()) {
      // The run goes on over [R, C] and its per-row values [R, 1] (reductions with keepdims). A value reduced
      // without keepdims starts a new run: over it, the last axis is another one (rows, not columns).
      Shape pm = main_shape(n);
      if (pm != m) {
        Shape red = m;
        if (!red.empty()) red.back() = 1;
        if (pm != red || m.empty()) break;
        if (find_op(n.op)->fusion == Fusion::RowReduce) break;  // over an axis of one element: as its own group, where that axis is the columns
      }
    }
    run.push_back(static_cast<int>(i));
    has_reduce = has_reduce || find_op(n.op)->fusion == Fusion::RowReduce;
  }
  // NHWC when a 4-D activation input prefers it and nothing reduces over the (logical) last axis.
  bool nhwc = false;
  if (m.size() == 4 && !has_reduce)
    for (int i : run)
      for (int in : g_.nodes[i].inputs)
        if (in >= 0 && !val(in).is_const && shape(in).size() == 4 && prefers_nhwc(in)) nhwc = true;
  gr.nhwc = nhwc;
  gr.O = m;
  if (nhwc) gr.O = {m[0], m[2], m[3], m[1]};
  if (gr.O.empty()) gr.O = {1};
  gr.C = gr.O.back();
  gr.R = prod(gr.O) / std::max<int64_t>(gr.C, 1);
  std::string label;
  for (int i : run) label += (label.empty() ? "" : "+") + g_.nodes[i].name;
  if (label.size() > 120 && run.size() > 1)  // (one node keeps its name: a Gelu is named so already, fuse_gelu.cpp)
    label = g_.nodes[run.front()].name + "+...+" + g_.nodes[run.back()].name;
  KernelCall call = rowwise_call(label, gr.R, gr.C);
  for (int i : run) {
    try {
      rowwise_node(call, gr, g_.nodes[i]);
    } catch (const LoweringIssue& e) {
      fail(g_.nodes[i], e.what());
    }
    done_[i] = true;
  }
  // Outputs: values read outside the group or graph outputs.
  std::set<int> members(run.begin(), run.end());
  for (int i : run)
    for (int o : g_.nodes[i].outputs) {
      if (o < 0 || !gr.node_of.count(o)) continue;
      bool outside = is_output_[o];
      bool other_reader = false;
      for (int u : users_[o])
        if (!members.count(u)) outside = true, other_reader = true;
      if (!outside) continue;
      Shape s = shape(o);
      if (is_output_[o] && !(gr.nhwc && s.size() == 4)) {
        // F32, or I32 for an integer or BOOL output (exact integers in f32, converted on the way out)
        const DType odt = plan_.buffers[out_buf_.at(o)].dtype;
        Stored so{out_buf_.at(o), 0, odt, false};
        rw_output(call, gr.node_of[o], so);
        remember(o, so);
        if (!other_reader) continue;
      }
      DType dtype = storage_type(o);
      if (st_[o].size() && dtype == st_[o].front().dtype) continue;  // the graph output serves the readers
      Stored so{temp(val(o).name, dtype, s), 0, dtype, gr.nhwc && s.size() == 4};
      rw_output(call, gr.node_of[o], so);
      remember(o, so);
      if (!gr.per_row[o]) int8_copy(call, gr.node_of[o], o, so.nhwc);
    }
  if (call.rows.outputs.empty()) return;  // nothing read: dead
  plan_.calls.push_back(std::move(call));
}

int Lowering::const_operand(KernelCall& call, Group& gr, std::vector<float> d, const Shape& s, const std::string& name) {
  if (d.size() == 1) return rw_node(call, rw::Op::Const, {}, d[0]);
  Shape full = s;
  while (full.size() < gr.O.size()) full.insert(full.begin(), 1);
  if (full.size() > gr.O.size()) throw LoweringIssue("constant '" + name + "' does not broadcast to the group");
  if (gr.nhwc && full.size() == 4) {
    d = permute_data(d, full, kToNhwc);
    full = {full[0], full[2], full[3], full[1]};
  }
  const bool per_row = full.back() == 1 && gr.C != 1;
  if (full.back() != gr.C && full.back() != 1) throw LoweringIssue("constant '" + name + "' does not broadcast to the group");
  Shape lead_s(full.begin(), full.end() - 1), lead_o(gr.O.begin(), gr.O.end() - 1);
  int64_t period = -1;  // lead_s = [1.., lead_o[k:]]
  for (size_t k = 0; k <= lead_o.size() && period < 0; ++k) {
    bool ok = true;
    for (size_t i = 0; i < lead_o.size(); ++i) ok = ok && (i < k ? lead_s[i] == 1 : lead_s[i] == lead_o[i]);
    if (ok) period = prod(lead_o, k);
  }
  if (period < 0 || (!per_row && full.back() != gr.C)) {  // materialise the broadcast
    Shape target = gr.O;
    if (per_row) target.back() = 1;
    d = broadcast_data(d, full, target);
    period = gr.R;
  }
  const int64_t cols = per_row ? 1 : gr.C;
  int b = const_f32(name, {period, cols}, d);
  return rw_input(call, Stored{b, 0, DType::F32, false}, per_row, period);
}

int Lowering::operand(KernelCall& call, Group& gr, int v) {
  if (auto it = gr.node_of.find(v); it != gr.node_of.end()) return it->second;
  const ir::Value& value = val(v);
  if (value.is_const && value.elements() == 1) return rw_node(call, rw::Op::Const, {}, const_floats(value)[0]);
  Shape ps = physical(gr, shape(v));
  if (ps.size() > gr.O.size()) throw LoweringIssue("value '" + value.name + "' does not broadcast to the group");
  const bool per_row = ps.back() == 1 && gr.C != 1;
  Shape lead_s(ps.begin(), ps.end() - 1), lead_o(gr.O.begin(), gr.O.end() - 1);
  // period: lead_s = [1.., lead_o[k:]]
  int64_t period = -1;
  for (size_t k = 0; k <= lead_o.size(); ++k) {
    bool ok = true;
    for (size_t d = 0; d < lead_o.size(); ++d) ok = ok && (d < k ? lead_s[d] == 1 : lead_s[d] == lead_o[d]);
    if (ok) {
      period = prod(lead_o, k);
      break;
    }
  }
  if (ps.back() != gr.C && ps.back() != 1) throw LoweringIssue("value '" + value.name + "' does not broadcast to the group");
  if (value.is_const) return const_operand(call, gr, const_floats(value), shape(v), value.name);
  Stored s = get_any(v, gr.nhwc);
  if (period < 0) {  // broadcast copy into a full-size temp
    Shape target = gr.O;
    if (per_row) target.back() = 1;
    Shape from = ps;
    std::vector<int64_t> st = strides_of(from);
    for (size_t d = 0; d < from.size(); ++d)
      if (from[d] == 1) st[d] = 0;
    Stored full{temp(value.name + ".broadcast", s.dtype, target), 0, s.dtype, false};
    view_copy(producer_label(v), s, 0, target, st, full, 0, strides_of(target));
    s = full;
    period = gr.R;
  }
  return rw_input(call, s, per_row, period == gr.R ? 0 : period);
}

void Lowering::rowwise_node(KernelCall& call, Group& gr, const ir::Node& n) {
  RowEmit e{*this, call, gr, n};
  const int r = find_op(n.op)->rowwise(e);
  gr.node_of[n.outputs[0]] = r;
  gr.per_row[n.outputs[0]] = e.out_per_row;
}

bool RowEmit::per_row(int v) const {
  if (auto it = gr.per_row.find(v); it != gr.per_row.end()) return it->second;
  Shape ps = L.physical(gr, L.shape(v));
  return ps.back() == 1 && gr.C != 1;
}

}  // namespace tpusim::compiler
