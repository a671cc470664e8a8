// `clchat devices`: every OpenCL platform and device, with what matters for
// running clchat.
#include <cstdio>

#include "app/commands.h"
#include "engine/cl/runtime.h"

namespace clchat::app {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List OpenCL platforms and devices");
  cmd->callback([] {
    const auto devices = list_devices();
    if (devices.empty()) select_device("");  // throws with install advice
    std::string platform;
    for (const DeviceInfo& d : devices) {
      if (d.platform_name != platform) {
        platform = d.platform_name;
        std::printf("platform: %s\n", platform.c_str());
      }
      std::printf("  [%d] %s (%s)\n", d.index, d.name.c_str(),
                  d.is_gpu   ? "gpu"
                  : d.is_cpu ? "cpu"
                             : "other");
      std::printf("      vendor %s, driver %s, %s\n", d.vendor.c_str(), d.driver_version.c_str(),
                  d.opencl_c_version.c_str());
      std::printf(
          "      %u compute units, global %.1f GiB (max alloc %.1f GiB), local %llu KiB, "
          "max work-group %zu\n",
          d.compute_units, double(d.global_mem_bytes) / (1 << 30),
          double(d.max_alloc_bytes) / (1 << 30),
          static_cast<unsigned long long>(d.local_mem_bytes / 1024), d.max_work_group_size);
      std::string ext;
      for (const char* e : {"cl_khr_fp16", "cl_khr_subgroups", "cl_khr_command_buffer",
                            "cl_khr_integer_dot_product", "cl_nv_device_attribute_query"}) {
        ext += std::string(e) + (d.has_extension(e) ? " yes  " : " no  ");
      }
      std::printf("      %s\n", ext.c_str());
    }
  });
}

}  // namespace clchat::app
