// Type checking is done once by `tsc --noEmit` (make typecheck); with
// isolatedModules in tsconfig.json ts-jest only transpiles, which keeps each
// test file fast on a 2-core machine.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { diagnostics: false }],
  },
  // Synthesizing a stack takes a few seconds; cdk-nag adds more.
  testTimeout: 60000,
};
