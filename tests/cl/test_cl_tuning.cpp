// The engine's tuning (engine/cl/tuning.h): per-device defaults (the values
// measured best, for a CPU device and for NVIDIA), the user's switches on top,
// check() rejecting what a device cannot run, and the table of keys behind
// `clchat bench --tune`: every key sets its own field and reads it back, and
// unknown keys and malformed values are errors that say so.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/cl/tuning.h"

namespace clchat {
namespace {

DeviceInfo cpu_device() {
  DeviceInfo d;
  d.name = "test cpu";
  d.platform_name = "Portable Computing Language";
  d.is_cpu = true;
  d.compute_units = 2;
  d.max_work_group_size = 4096;
  d.local_mem_bytes = 4 << 20;
  return d;
}

DeviceInfo nvidia_device() {
  DeviceInfo d;
  d.name = "test gpu";
  d.platform_name = "NVIDIA CUDA";
  d.is_gpu = true;
  d.compute_units = 132;
  d.max_work_group_size = 1024;
  d.local_mem_bytes = 48 << 10;
  return d;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tuning, CpuDefaults) {
  const Tuning t = Tuning::for_device(cpu_device());
  const KernelTuning& p = t.decode.plan;
  EXPECT_EQ(p.tpr, 1);
  EXPECT_EQ(p.rows, 128);
  EXPECT_EQ(p.att_wg, 64);
  EXPECT_EQ(p.argmax_wg, 64);
  EXPECT_EQ(p.sample_wg, 1);  // a work-group runs serially: no atomics
  EXPECT_TRUE(p.cpu_kernels);
  EXPECT_EQ(p.cpu_nr, 4);
  EXPECT_TRUE(p.cpu_fuse);
  EXPECT_FALSE(p.nv_shfl);
  EXPECT_TRUE(t.decode.persistent);
  EXPECT_TRUE(t.decode.lookahead);
  EXPECT_EQ(t.decode.persist_groups, 0);
  EXPECT_TRUE(t.prefill.mm_direct);
  EXPECT_EQ(t.prefill.mm_wt, 12);
  EXPECT_EQ(t.prefill.att_ks, 1);
  EXPECT_EQ(t.prefill.norm_wg, 16);
  EXPECT_FALSE(t.prefill.tensor_cores);
}

TEST(Tuning, NvidiaDefaults) {
  const Tuning t = Tuning::for_device(nvidia_device());
  EXPECT_EQ(t.decode.plan.tpr, 8);
  EXPECT_EQ(t.decode.plan.rows, 4);
  EXPECT_EQ(t.decode.plan.att_wg, 128);
  EXPECT_EQ(t.decode.plan.argmax_wg, 256);
  EXPECT_EQ(t.decode.plan.sample_wg, 256);
  EXPECT_FALSE(t.decode.plan.cpu_kernels);
  EXPECT_TRUE(t.decode.plan.nv_shfl);
  EXPECT_FALSE(t.prefill.mm_direct);
  EXPECT_EQ(t.prefill.mm_vr, 4);
  EXPECT_TRUE(t.prefill.tensor_cores);
}

TEST(Tuning, SwitchesTurnThePathsOff) {
  EngineSwitches s;
  s.persistent_decode = false;
  s.lookahead = false;
  s.tensor_cores = false;
  const Tuning t = Tuning::for_device(nvidia_device(), s);
  EXPECT_FALSE(t.decode.persistent);
  EXPECT_FALSE(t.decode.lookahead);
  EXPECT_FALSE(t.prefill.tensor_cores);
  // Tensor cores stay off where there are none, whatever the switch says.
  EXPECT_FALSE(Tuning::for_device(cpu_device(), EngineSwitches{}).prefill.tensor_cores);
}

TEST(Tuning, CheckAcceptsDefaultsAndNamesBadValues) {
  for (const DeviceInfo& d : {cpu_device(), nvidia_device()}) {
    Tuning t = Tuning::for_device(d);
    EXPECT_NO_THROW(t.check(d)) << d.name;
  }
  const DeviceInfo gpu = nvidia_device();
  auto error_with = [&](const char* key_value) {
    Tuning t = Tuning::for_device(gpu);
    set_tuning(t, key_value);
    return message_of([&] { t.check(gpu); });
  };
  EXPECT_NE(error_with("tpr=3").find("tpr 3"), std::string::npos);
  EXPECT_NE(error_with("rows=5").find("rows 5"), std::string::npos);
  EXPECT_NE(error_with("att_wg=2048").find("att_wg 2048"), std::string::npos);
  EXPECT_NE(error_with("persist_wg_size=128").find("128"), std::string::npos);
  EXPECT_NE(error_with("persist_groups=-1").find("persist_groups -1"), std::string::npos);
  EXPECT_NE(error_with("mm_vr=3").find("mm_vr 3"), std::string::npos);
  EXPECT_NE(error_with("att_ks=3").find("att_ks 3"), std::string::npos);
  EXPECT_NE(error_with("mma_wr=64").find("mma_wr 64"), std::string::npos);
  EXPECT_NE(error_with("mma_stages=1").find("mma_stages 1"), std::string::npos);
  EXPECT_NE(error_with("mma_stages=5").find("mma_stages 5"), std::string::npos);
  EXPECT_NE(error_with("mma_split=0").find("mma_split 0"), std::string::npos);
  EXPECT_NE(error_with("mma_split=5").find("mma_split 5"), std::string::npos);
  EXPECT_NE(error_with("mma_large=-1").find("mma_large -1"), std::string::npos);
  EXPECT_NE(error_with("mma_large=5").find("mma_large 5"), std::string::npos);
  EXPECT_NE(error_with("mma_kb=0").find("mma_kb 0"), std::string::npos);
  EXPECT_NE(error_with("norm_wg=48").find("48"), std::string::npos);
  // the CPU attention kernel's private arrays
  const DeviceInfo cpu = cpu_device();
  Tuning c = Tuning::for_device(cpu);
  set_tuning(c, "att_tq=65");
  EXPECT_NE(message_of([&] { c.check(cpu); }).find("att_tq 65"), std::string::npos);
}

TEST(Tuning, CheckFitsDependentValues) {
  const DeviceInfo cpu = cpu_device();
  Tuning t = Tuning::for_device(cpu);
  t.decode.plan.rows = 6;  // cpu_nr 4 does not divide it
  t.check(cpu);
  EXPECT_EQ(t.decode.plan.cpu_nr, 2);
  const DeviceInfo gpu = nvidia_device();
  Tuning g = Tuning::for_device(gpu);
  g.decode.plan.tpr = 64;
  g.decode.plan.rows = 2;
  g.check(gpu);
  EXPECT_FALSE(g.decode.plan.nv_shfl);  // a row's work-items must fit a warp
}

TEST(TuningKeys, NamesAreUniqueAndTyped) {
  std::set<std::string_view> names;
  for (const TuningKey& k : tuning_keys()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_TRUE(k.type == "int" || k.type == "bool" || k.type == "string") << k.name;
    EXPECT_FALSE(k.help.empty()) << k.name;
  }
  for (const char* n : {"tpr",
                        "rows",
                        "att_wg",
                        "sample_wg",
                        "cpu_kernels",
                        "cpu_nr",
                        "cpu_fuse",
                        "nv_shfl",
                        "persistent",
                        "lookahead",
                        "persist_wg_size",
                        "persist_wgs_per_cu",
                        "persist_groups",
                        "att_split_pos",
                        "trace",
                        "persist_defines",
                        "mm_vr",
                        "att_tq",
                        "tensor_cores",
                        "mma_kb",
                        "profile"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
  }
}

// Each key, set to a value other than its default, reads that value back and
// changes no other key's value: no two keys share a field.
TEST(TuningKeys, EveryKeyRoundTripsAlone) {
  const Tuning defaults = Tuning::for_device(cpu_device());
  for (const TuningKey& k : tuning_keys()) {
    SCOPED_TRACE(std::string(k.name));
    const std::string before = k.get(defaults);
    std::string value;
    if (k.type == "int") {
      value = std::to_string(std::stoi(before) + 3);
    } else if (k.type == "bool") {
      value = before == "1" ? "0" : "1";
    } else {
      value = before + " -DX=1";
    }
    Tuning t = defaults;
    set_tuning(t, std::string(k.name) + "=" + value);
    EXPECT_EQ(k.get(t), value);
    for (const TuningKey& other : tuning_keys()) {
      if (other.name == k.name) continue;
      EXPECT_EQ(other.get(t), other.get(defaults)) << other.name;
    }
  }
}

TEST(TuningKeys, BoolsTakeWordsAndDigits) {
  Tuning t;
  set_tuning(t, "persistent=false");
  EXPECT_FALSE(t.decode.persistent);
  set_tuning(t, "persistent=true");
  EXPECT_TRUE(t.decode.persistent);
  set_tuning(t, "lookahead=0");
  EXPECT_FALSE(t.decode.lookahead);
  set_tuning(t, "persist_defines=-DA=1 -DB=2");  // everything after the first '='
  EXPECT_EQ(t.decode.persist_defines, "-DA=1 -DB=2");
}

TEST(TuningKeys, UnknownKeysAndBadValuesAreRejected) {
  Tuning t;
  auto error_of = [&](const char* key_value) {
    return message_of([&] { set_tuning(t, key_value); });
  };
  EXPECT_NE(error_of("bogus=1").find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("TPR=8").find("unknown key 'TPR'"), std::string::npos);
  EXPECT_NE(error_of("tpr").find("expected KEY=VALUE"), std::string::npos);
  for (const char* bad : {"tpr=abc", "tpr=", "tpr=1.5", "tpr=8x", "tpr=99999999999"}) {
    EXPECT_NE(error_of(bad).find("is not an integer"), std::string::npos) << bad;
  }
  for (const char* bad : {"persistent=yes", "persistent=", "persistent=2"}) {
    EXPECT_NE(error_of(bad).find("is not a boolean"), std::string::npos) << bad;
  }
  const Tuning untouched;
  for (const TuningKey& k : tuning_keys()) EXPECT_EQ(k.get(t), k.get(untouched)) << k.name;
}

}  // namespace
}  // namespace clchat
