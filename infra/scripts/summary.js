// Prints the closing line of `make test`: jest's counts plus the other checks
// (type check, synth, cfn-lint), as "infra: N passed, N failed".
const fs = require('fs');
const [file, extraPass, extraFail] = process.argv.slice(2);
let passed = Number(extraPass || 0);
let failed = Number(extraFail || 0);
try {
  const r = JSON.parse(fs.readFileSync(file, 'utf-8'));
  passed += r.numPassedTests;
  failed += r.numFailedTests + (r.numRuntimeErrorTestSuites || 0);
  if (r.numTotalTests === 0) failed += 1; // a run that ran no test is a failure
} catch (e) {
  console.error(`no jest results in ${file}: ${e.message}`);
  failed += 1;
}
console.log(`infra: ${passed} passed, ${failed} failed`);
