// The `zaya` subcommands; each file registers one on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

namespace zaya::cli {

void register_info(CLI::App &app);
void register_forward(CLI::App &app);
void register_grads(CLI::App &app);
void register_train(CLI::App &app);
void register_init(CLI::App &app);
void register_bench(CLI::App &app);
void register_prepare(CLI::App &app);

} // namespace zaya::cli
