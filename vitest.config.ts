import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Crash tests spawn real child processes; keep the pool small on 2-core machines.
    maxWorkers: 2
  }
})
