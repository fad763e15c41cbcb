// The client API over simulated chips: devices, buffers, executables, asynchronous execution on one and several
// devices, and every error as a status. Each test runs in its own process (one SystemC elaboration each).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "../src/client_core.h"  // the simulation thread's counters and queue, for the batching tests
#include "onnx_models.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace {
using namespace tpusim;
using runtime::Buffer;
using runtime::Client;
using runtime::ExecuteArgs;
using runtime::Executable;
using runtime::HostTensor;
using runtime::StatusCode;

sim::ChipConfig config() { return sim::load_config("v4-like"); }

Executable kernel(const Client& c, const char* name, std::map<std::string, int64_t> d) {
  for (const auto& [k, v] : sim::kernel_symbols(c.config())) d[k] = v;
  return Executable(kernels::assemble(name, d));
}
Executable gemm(const Client& c, int64_t m, int64_t k, int64_t n) {
  return kernel(c, "gemm_int8.s", {{"M", m}, {"K", k}, {"N", n}});
}

std::map<std::string, HostTensor> random_inputs(const Executable& exe, uint64_t seed) {
  std::map<std::string, HostTensor> in;
  for (const auto* d : exe.inputs()) in[d->name] = runtime::random_tensor(*d, seed + in.size());
  return in;
}

ExecuteArgs upload(Client& c, const std::map<std::string, HostTensor>& in, int device) {
  ExecuteArgs a;
  a.device = device;
  for (const auto& [name, t] : in) a.inputs[name] = c.buffer_from_host(t, device).value();
  return a;
}

TEST(Client, DevicesAndMemorySpaces) {
  Client c(config(), 2);
  ASSERT_EQ(c.device_count(), 2);
  EXPECT_EQ(c.devices()[1].id, 1);
  EXPECT_EQ(c.devices()[0].kind, "tpusim");
  EXPECT_EQ(c.devices()[0].attributes.at("mxu_rows"), c.config().mxu.rows);
  EXPECT_EQ(c.devices()[0].attributes.at("hbm_bytes"), double(c.config().hbm_bytes()));
  EXPECT_NE(c.devices()[0].to_string().find("tpusim:0 ("), std::string::npos);
  auto spaces = c.memory_spaces();
  ASSERT_EQ(spaces.size(), 3u);
  EXPECT_EQ(spaces[1].device, 1);
  EXPECT_EQ(spaces[2].kind, runtime::MemoryKind::kHost);
}

TEST(Client, BufferRoundTripCopiesAtTheCall) {
  Client c(config());
  std::vector<int32_t> host{1, 2, 3, 4, 5, 6};
  Buffer b = c.buffer_from_host(host.data(), isa::DType::I32, {2, 3}, 0).value();
  host.assign(6, 0);  // copy semantics: the caller may reuse its memory at once
  EXPECT_TRUE(b.ready().await().ok());
  EXPECT_EQ(b.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.bytes(), 24u);
  EXPECT_EQ(c.memory_stats(0).live_count, 1u);
  HostTensor t = b.to_host().await().value();
  std::vector<int32_t> back(6);
  std::memcpy(back.data(), t.data.data(), 24);
  EXPECT_EQ(back, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  std::vector<int32_t> into(6, -1);  // the same into the caller's memory
  EXPECT_TRUE(b.to_host(into.data()).await().ok());
  EXPECT_EQ(into, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  b.Delete();
  EXPECT_TRUE(b.deleted());
  EXPECT_EQ(c.memory_stats(0).live_count, 0u);
  auto r = b.to_host().await();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "to_host of a deleted buffer");
  EXPECT_EQ(b.to_host(into.data()).await().status().message(), "to_host of a deleted buffer");
}

TEST(Client, ZeroCopyBufferTakesNoHbm) {
  Client c(config());
  std::vector<float> host{1.5f, -2.0f};
  Buffer b = c.buffer_from_host(host.data(), isa::DType::F32, {2}, 0, runtime::HostSemantics::kZeroCopy).value();
  EXPECT_EQ(b.memory(), runtime::MemoryKind::kHost);
  EXPECT_EQ(c.memory_stats(0).live_count, 0u);
  host[0] = 7.0f;  // zero copy: the buffer sees the caller's memory
  HostTensor t = b.to_host().await().value();
  float f;
  std::memcpy(&f, t.data.data(), 4);
  EXPECT_EQ(f, 7.0f);
}

TEST(Client, ExecuteMatchesTheConvenienceLayer) {
  Client c(config());
  Executable exe = gemm(c, 64, 128, 96);
  auto in = random_inputs(exe, 5);
  runtime::ExecuteResult want = c.execute(exe, in);
  auto f = c.execute_async(exe, upload(c, in, 0));
  const auto& out = f.await();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out.value().run.stats.cycles, want.run.stats.cycles);
  for (const auto& [name, t] : want.outputs)
    EXPECT_EQ(out.value().outputs.at(name).to_host().await().value().data, t.data) << name;
}

TEST(Client, ArgumentErrorsAreStatuses) {
  Client c(config(), 2);
  Executable exe = gemm(c, 16, 32, 16);
  auto in = random_inputs(exe, 1);
  auto code_and_message = [&](ExecuteArgs a) {
    const auto& r = c.execute_async(exe, a).await();
    EXPECT_FALSE(r.ok());
    return r.status().to_string();
  };
  ExecuteArgs good = upload(c, in, 0);
  ExecuteArgs a = good;
  a.inputs.erase("a");
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: missing input 'a' (a: i8 [16, 32])");
  a = good;
  a.device = 1;
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: input 'a': the buffer is on device 0, the execution on device 1");
  a.device = 7;
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: device 7 does not exist (the client has 2)");
  a = good;
  a.inputs["a"] = a.inputs["b"];
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: input 'a': expected i8 [16, 32], got i8 [32, 16]");
  std::vector<float> f(16 * 32);
  a.inputs["a"] = c.buffer_from_host(f.data(), isa::DType::F32, {16, 32}, 0).value();
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: input 'a': expected i8 [16, 32], got f32 [16, 32]");
  a = good;
  a.inputs["q"] = good.inputs["a"];
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: program 'gemm_int8' has no input 'q' (its inputs: a, b)");
  a = good;
  Buffer gone = c.buffer_from_host(in.at("a"), 0).value();
  a.inputs["a"] = gone;
  gone.Delete();
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: input 'a': the buffer was deleted");
  a = good;
  a.inputs["a"] = Buffer();
  EXPECT_EQ(code_and_message(a), "INVALID_ARGUMENT: input 'a': no buffer");
  EXPECT_TRUE(c.execute_async(exe, good).await().ok());  // nothing above broke the client
}

TEST(Client, OutOfMemoryNamesTheRequestAndTheLiveBuffers) {
  sim::ChipConfig cfg = config();
  cfg.hbm.size_mib = 4;
  Client c(cfg);
  const int64_t n = (4 << 20) - 512;  // all of HBM but its first 512 bytes
  std::vector<uint8_t> big(n);
  Buffer b = c.buffer_from_host(big.data(), isa::DType::I8, {n}, 0).value();
  auto r = c.buffer_from_host(big.data(), isa::DType::I8, {2 << 20}, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("device 0 HBM: out of memory allocating 2097152 bytes"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("live: 1 allocations, 4193792 bytes; largest: 'i8 [4193792] from host'"),
            std::string::npos)
      << r.status().message();
  // A buffer in the program's declared range makes its execution fail the same way, naming it.
  Executable small = gemm(c, 16, 32, 16);  // a, b, c from address 0: 512 + 512 + 1024 bytes
  auto in = random_inputs(small, 1);
  ExecuteArgs args;
  for (const auto& [name, t] : in)
    args.inputs[name] =
        c.buffer_from_host(t.data.data(), t.dtype, t.shape, 0, runtime::HostSemantics::kZeroCopy).value();
  const auto& e = c.execute_async(small, args).await();
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(e.status().message().find("in use by 'i8 [4193792] from host'"), std::string::npos)
      << e.status().message();
  b.Delete();
  EXPECT_TRUE(c.execute_async(small, args).await().ok());
  EXPECT_EQ(c.fits(gemm(c, 1024, 1024, 1024)).code(), StatusCode::kInvalidArgument);  // 6 MiB of tensors
}

TEST(Client, TensorsKeptInVmemMustFitTheChipsVmem) {
  // A program that keeps a tensor in VMEM (`@ vmem ADDR`) up to byte VMEM + 1 does not fit: fits() says so,
  // with both numbers; one that ends exactly at VMEM's size fits.
  Client c(config());
  const uint64_t vmem = c.config().vmem_bytes();
  auto program = [&](uint64_t end) {
    isa::Program p;
    p.name = "resident";
    isa::TensorDecl t;
    t.name = "x", t.kind = isa::TensorKind::Input, t.dtype = isa::DType::I8, t.shape = {1024};
    t.space = isa::MemSpace::Vmem, t.addr = end - 1024;
    p.tensors.push_back(t);
    return p;
  };
  EXPECT_TRUE(c.fits(Executable(program(vmem))).ok());
  const runtime::Status s = c.fits(Executable(program(vmem + 1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "program 'resident' keeps tensors in VMEM up to byte " + std::to_string(vmem + 1) +
                             ", the chip has " + std::to_string(vmem));
}

TEST(Client, DonationReusesTheInputsMemory) {
  Client c(config());
  Executable exe = kernel(c, "vadd.s", {{"N", 4096}});  // y = a + b, all f32 [4096]
  auto in = random_inputs(exe, 3);
  ExecuteArgs args = upload(c, in, 0);
  args.donate = {"a"};
  Buffer a = args.inputs["a"];
  ASSERT_EQ(c.memory_stats(0).live_count, 2u);
  auto f = c.execute_async(exe, args);
  EXPECT_TRUE(a.deleted());  // donated: gone at the call
  const auto& r = f.await();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(c.memory_stats(0).live_count, 2u);  // b, and y in a's old place
  EXPECT_EQ(c.memory_stats(0).total_allocations, 3u);  // a, b and the declared range: y took a's place
  EXPECT_EQ(c.execute_async(exe, args).await().status().message(), "input 'a': the buffer was deleted");
  EXPECT_EQ(r.value().outputs.at("y").to_host().await().value().data, c.execute(exe, in).outputs.at("y").data);
}

TEST(Client, NoLeakOverThousandsOfExecutions) {
  Client c(config());
  Executable exe = kernel(c, "vadd.s", {{"N", 256}});
  auto in = random_inputs(exe, 3);
  ExecuteArgs args = upload(c, in, 0);
  const uint64_t before = c.memory_stats(0).live_count;
  for (int i = 0; i < 3000; ++i) {
    const auto& r = c.execute_async(exe, args).await();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    if (i % 2) {  // drop the outputs now, or let the next iteration's reassignment do it
      for (auto [n, b] : r.value().outputs) b.Delete();
    }
  }
  EXPECT_EQ(c.memory_stats(0).live_count, before);
  EXPECT_EQ(c.memory_stats(0).live_bytes, 2u * 256 * 4);
  EXPECT_EQ(c.memory_stats(0).total_allocations, 2u + 2u * 3000);  // one output + the declared range each time
}

TEST(Client, SeveralDevicesRunTogether) {
  Client c(config(), 3);
  Executable exe = gemm(c, 64, 64, 64);
  std::vector<std::map<std::string, HostTensor>> in;
  std::vector<ExecuteArgs> args;
  for (int d = 0; d < 3; ++d) {
    in.push_back(random_inputs(exe, 10 * d));
    args.push_back(upload(c, in.back(), d));
  }
  auto futures = c.execute_async(exe, args);
  ASSERT_EQ(futures.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    const auto& r = futures[d].await();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    runtime::ExecuteResult serial = c.execute(exe, in[d]);
    EXPECT_EQ(r.value().run.stats.cycles, serial.run.stats.cycles);
    EXPECT_EQ(r.value().outputs.at("c").device(), d);
    EXPECT_EQ(r.value().outputs.at("c").to_host().await().value().data, serial.outputs.at("c").data);
  }
  args[1].device = 0;
  EXPECT_EQ(c.execute_async(exe, args)[0].await().status().message(), "device 0 is given twice in one execution");
}

// The client's core, reached through a buffer (test-only: the simulation thread's counters and queue).
std::shared_ptr<runtime::detail::ClientCore> core_of(Client& c) {
  Buffer b = c.buffer_from_host(nullptr, isa::DType::I8, {0}, 0, runtime::HostSemantics::kZeroCopy).value();
  return runtime::detail::ClientCore::state_of(b)->client.lock();
}

// Holds the simulation thread (a task on no device runs alone) until open() or destruction, so that what is
// submitted meanwhile waits in the queue together.
struct Gate {
  explicit Gate(runtime::detail::ClientCore& core) {
    std::shared_future<void> f = p.get_future().share();
    EXPECT_TRUE(core.post([f] { f.wait(); }));
  }
  ~Gate() { open(); }
  void open() {
    if (!opened) p.set_value();
    opened = true;
  }
  std::promise<void> p;
  bool opened = false;
};

// Simulations (sc_start runs) made for executions since construction, and chips started in them.
struct Sims {
  explicit Sims(const runtime::detail::ClientCore& c) : core(c), sims0(c.simulations), chips0(c.chips_simulated) {}
  uint64_t simulations() const { return core.simulations - sims0; }
  uint64_t chips() const { return core.chips_simulated - chips0; }
  const runtime::detail::ClientCore& core;
  const uint64_t sims0, chips0;
};

TEST(Client, SeparateSubmissionsOnDevicesRunTogether) {
  Client c(config(), 2);
  auto core = core_of(c);
  Executable exe = gemm(c, 64, 128, 96);
  std::vector<std::map<std::string, HostTensor>> in;
  std::vector<ExecuteArgs> args;
  for (int d = 0; d < 2; ++d) {
    in.push_back(random_inputs(exe, 20 + d));
    args.push_back(upload(c, in.back(), d));
    for (const auto& [n, b] : args.back().inputs) ASSERT_TRUE(b.ready().await().ok());
  }
  std::vector<runtime::Future<runtime::ExecuteOutput>> f(2);
  Sims sims(*core);
  {
    Gate gate(*core);
    std::vector<std::thread> threads;  // two threads, one execution each, on different devices
    for (int d = 0; d < 2; ++d) threads.emplace_back([&, d] { f[d] = c.execute_async(exe, args[d]); });
    for (auto& t : threads) t.join();
  }
  for (int d = 0; d < 2; ++d) ASSERT_TRUE(f[d].await().ok()) << f[d].await().status().to_string();
  EXPECT_EQ(sims.simulations(), 1u);  // both in one simulation
  EXPECT_EQ(sims.chips(), 2u);
  for (int d = 0; d < 2; ++d) {
    runtime::ExecuteResult serial = c.execute(exe, in[d]);  // alone, on device 0
    EXPECT_EQ(f[d].await().value().run.stats.cycles, serial.run.stats.cycles) << d;
    EXPECT_EQ(f[d].await().value().run.stats.units[0].instructions, serial.run.stats.units[0].instructions) << d;
    EXPECT_EQ(f[d].await().value().outputs.at("c").device(), d);
    EXPECT_EQ(f[d].await().value().outputs.at("c").to_host().await().value().data, serial.outputs.at("c").data) << d;
  }
}

TEST(Client, BatchStopsAtWorkThatMustWait) {
  Client c(config(), 2);
  auto core = core_of(c);
  Executable exe = gemm(c, 64, 64, 64);
  auto in0 = random_inputs(exe, 1), in1 = random_inputs(exe, 2);
  ExecuteArgs a0 = upload(c, in0, 0), a1 = upload(c, in1, 1);
  const uint64_t cycles = c.execute(exe, in0).run.stats.cycles;
  auto ok = [&](const runtime::Future<runtime::ExecuteOutput>& f) {
    const auto& r = f.await();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() && r.value().run.stats.cycles == cycles;
  };
  {  // A to_host on a device of the batch waits for the batch's execution there: the batch ends before it.
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    auto host = a0.inputs.at("a").to_host();
    auto e1 = c.execute_async(exe, a1);
    gate.open();
    ASSERT_TRUE(host.await().ok());
    EXPECT_TRUE(e0.ready());  // completed before the to_host ran
    EXPECT_EQ(host.await().value().data, in0.at("a").data);
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 2u);  // e0 alone; then e1 after the to_host
    EXPECT_EQ(sims.chips(), 2u);
  }
  {  // ... but not one on another device, nor an execution after it: e0 and e1 run together, the to_host after.
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    auto e1 = c.execute_async(exe, a1);
    auto host = a0.inputs.at("b").to_host();
    gate.open();
    ASSERT_TRUE(host.await().ok());
    EXPECT_TRUE(e0.ready());
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 1u);
    EXPECT_EQ(sims.chips(), 2u);
  }
  {  // A second execution on a device of the batch ends it, even if later work could have joined.
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    auto again = c.execute_async(exe, a0);
    auto e1 = c.execute_async(exe, a1);
    gate.open();
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(again));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 2u);  // e0; then again and e1 together
    EXPECT_EQ(sims.chips(), 3u);
  }
  {  // A host-to-device copy for another device goes first, and the execution using it joins the batch.
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    ExecuteArgs fresh = upload(c, in0, 1);  // copies queued after e0
    auto e1 = c.execute_async(exe, fresh);
    gate.open();
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 1u);
    EXPECT_EQ(sims.chips(), 2u);
    EXPECT_EQ(e1.await().value().outputs.at("c").to_host().await().value().data,
              e0.await().value().outputs.at("c").to_host().await().value().data);
  }
  {  // A donated input is gone at the call (a later execution using it fails at once); the batch runs on.
    Sims sims(*core);
    Gate gate(*core);
    ExecuteArgs d0 = upload(c, in0, 0);
    d0.donate = {"a"};
    auto e0 = c.execute_async(exe, d0);
    EXPECT_TRUE(d0.inputs.at("a").deleted());
    auto after = c.execute_async(exe, d0);  // its input was donated: an error at the call
    auto e1 = c.execute_async(exe, a1);
    gate.open();
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(after.await().status().message(), "input 'a': the buffer was deleted");
    EXPECT_EQ(sims.simulations(), 1u);
  }
  {  // A task on no particular device keeps its place: executions before and after it do not run together.
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    std::promise<bool> saw;
    ASSERT_TRUE(core->post([&saw, e0] { saw.set_value(e0.ready()); }));
    auto e1 = c.execute_async(exe, a1);
    gate.open();
    EXPECT_TRUE(saw.get_future().get());
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 2u);
  }
  {  // Without batching, one item at a time (as before).
    core->batching = false;
    Sims sims(*core);
    Gate gate(*core);
    auto e0 = c.execute_async(exe, a0);
    auto e1 = c.execute_async(exe, a1);
    gate.open();
    EXPECT_TRUE(ok(e0));
    EXPECT_TRUE(ok(e1));
    EXPECT_EQ(sims.simulations(), 2u);
    core->batching = true;
  }
  // The simulation thread lets go of a batch (and the results in its promises) after completing it: once a later
  // execution is done, every earlier one is gone.
  c.execute(exe, in0);
  for (int d = 0; d < 2; ++d) EXPECT_EQ(c.memory_stats(d).live_count, 2u) << d;  // a and b of a0 / a1
}

// Issue 14, bug 1: a device whose arguments are wrong got its Future's value at submission and again when the
// other devices' run finished (std::future_error "Promise already satisfied", the process aborted).
TEST(Client, MultiDeviceCallWithOneBadDeviceFailsOnlyThatDevice) {
  Client c(config(), 3);
  Executable exe = gemm(c, 64, 64, 64);
  std::vector<std::map<std::string, HostTensor>> in;
  std::vector<ExecuteArgs> args;
  for (int d = 0; d < 3; ++d) {
    in.push_back(random_inputs(exe, 7 * d));
    args.push_back(upload(c, in.back(), d));
  }
  args[1].inputs.erase("b");  // device 1: a missing input
  auto futures = c.execute_async(exe, args);
  ASSERT_EQ(futures.size(), 3u);
  EXPECT_EQ(futures[1].await().status().to_string(), "INVALID_ARGUMENT: missing input 'b' (b: i8 [64, 64])");
  for (int d : {0, 2}) {
    const auto& r = futures[d].await();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value().outputs.at("c").to_host().await().value().data, c.execute(exe, in[d]).outputs.at("c").data);
  }
}

// Issue 14, bug 2: a second Client was accepted (and crashed later). It is refused, even after the first is gone.
TEST(Client, SecondClientIsRefusedWithFailedPrecondition) {
  auto first = Client::Create(config());
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = Client::Create(config());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message().find('\n'), std::string::npos);  // one line
  EXPECT_NE(second.status().message().find("already made"), std::string::npos) << second.status().message();
  EXPECT_THROW(Client second_client{config()}, runtime::Error);
  Client& c = *first.value();
  Executable exe = gemm(c, 16, 32, 16);
  EXPECT_TRUE(c.execute_async(exe, upload(c, random_inputs(exe, 1), 0)).await().ok());  // the first runs on
  first.value().reset();
  EXPECT_EQ(Client::Create(config()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Client::Create(config(), 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(Client, FaultsAreAbortedStatusesAndTheChipRunsOn) {
  Client c(config(), 2);
  Executable exe = gemm(c, 64, 64, 64);
  auto in = random_inputs(exe, 1);
  runtime::ExecuteOptions o;
  o.max_cycles = 10;
  auto fs = c.execute_async(exe, {upload(c, in, 0), upload(c, in, 1)}, o);
  for (auto& f : fs) {
    EXPECT_EQ(f.await().status().code(), StatusCode::kAborted);
    EXPECT_NE(f.await().status().message().find("still running after 10 cycles"), std::string::npos);
  }
  EXPECT_TRUE(c.execute_async(exe, upload(c, in, 1)).await().ok());
  EXPECT_THROW(c.execute(exe, in, o), runtime::Error);
}

TEST(Executable, FingerprintSerializeAndCache) {
  EXPECT_EQ(runtime::fnv1a64(reinterpret_cast<const uint8_t*>("a"), 1), 0xaf63dc4c8601ec8cull);  // FNV-1a's own
  Client c(config());
  Executable a = gemm(c, 16, 32, 16), b = gemm(c, 16, 32, 16), other = gemm(c, 16, 32, 32);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), other.fingerprint());
  EXPECT_EQ(a.fingerprint_hex().size(), 16u);
  Executable back = Executable::deserialize(a.serialize()).value();
  EXPECT_EQ(back.program(), a.program());
  EXPECT_EQ(back.fingerprint(), a.fingerprint());
  EXPECT_EQ(Executable::deserialize({1, 2, 3}).status().code(), StatusCode::kInvalidArgument);
  Executable l1 = c.load_program(a.program()).value();
  Executable l2 = c.deserialize_executable(a.serialize()).value();
  EXPECT_EQ(&l1.program(), &l2.program());  // the cached one
  EXPECT_EQ(c.cache_stats().hits, 1u);
}

TEST(Executable, OnnxCompiledOnce) {
  Client c(config());
  auto path = std::filesystem::temp_directory_path() / ("rt_cache_" + std::to_string(::getpid()) + ".onnx");
  {
    std::ofstream f(path, std::ios::binary);
    f << compiler::test::linear_model(8, 64, 32).bytes();
  }
  Executable e1 = c.compile_onnx(path.string()).value();
  EXPECT_EQ(c.cache_stats().compilations, 1u);
  Executable e2 = c.compile_onnx_file(path.string());
  EXPECT_EQ(c.cache_stats().compilations, 1u);
  EXPECT_EQ(c.cache_stats().hits, 1u);
  EXPECT_EQ(&e1.program(), &e2.program());
  EXPECT_EQ(c.compile_onnx("/nonexistent.onnx").status().code(), StatusCode::kNotFound);
  std::filesystem::remove(path);
}

// Issue 14, bug 4: the cache was keyed by the path as typed, and a model had to be a file.
TEST(Executable, OnnxCacheKeyedByCanonicalPathAndByContent) {
  Client c(config());
  auto dir = std::filesystem::temp_directory_path() / ("rt_cache_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "sub");
  const std::string bytes = compiler::test::linear_model(8, 64, 32).bytes();
  {
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << bytes;
  }
  Executable e1 = c.compile_onnx((dir / "m.onnx").string()).value();
  Executable e2 = c.compile_onnx((dir / "sub" / ".." / "." / "m.onnx").string()).value();
  EXPECT_EQ(c.cache_stats().compilations, 1u);  // one file, two spellings
  EXPECT_EQ(&e1.program(), &e2.program());
  // From bytes: the same program as from the file (same stem), compiled once more (keyed by content), then cached.
  Executable b1 = c.compile_onnx_bytes(bytes, {}, "m.onnx").value();
  EXPECT_EQ(c.cache_stats().compilations, 2u);
  EXPECT_EQ(b1.fingerprint(), e1.fingerprint());
  std::string copy = bytes;  // equal content at another address
  Executable b2 = c.compile_onnx_bytes(copy, {}, "elsewhere/m.onnx").value();
  EXPECT_EQ(c.cache_stats().compilations, 2u);
  EXPECT_EQ(&b1.program(), &b2.program());
  Executable other = c.compile_onnx_bytes(compiler::test::linear_model(8, 64, 16).bytes(), {}, "m.onnx").value();
  EXPECT_EQ(c.cache_stats().compilations, 3u);
  EXPECT_NE(other.fingerprint(), b1.fingerprint());
  auto bad = c.compile_onnx_bytes("not a model", {}, "junk.onnx");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("junk.onnx"), std::string::npos) << bad.status().message();
  // A rewritten file (new size) is compiled again.
  {
    std::ofstream f(dir / "m.onnx", std::ios::binary);
    f << compiler::test::linear_model(8, 64, 16).bytes();
  }
  EXPECT_EQ(c.compile_onnx((dir / "m.onnx").string()).value().fingerprint(), other.fingerprint());
  EXPECT_EQ(c.cache_stats().compilations, 4u);
  std::filesystem::remove_all(dir);
}

TEST(Executable, CostAnalysis) {
  Client c(config());
  Executable exe = gemm(c, 64, 128, 96);
  runtime::CostAnalysis cost = c.cost_analysis(exe).value();
  EXPECT_EQ(cost.macs, 64u * 128 * 96);
  EXPECT_EQ(cost.flops, 2u * 64 * 128 * 96);
  EXPECT_EQ(cost.input_bytes, 64u * 128 + 128u * 96);
  EXPECT_EQ(cost.output_bytes, 64u * 96 * 4);
  EXPECT_EQ(cost.cycles, c.execute(exe, random_inputs(exe, 1)).run.stats.cycles);
}

}  // namespace
