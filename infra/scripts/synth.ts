/**
 * Synthesizes the Tern stack without building the Rust code (bundling skipped),
 * with the cdk-nag checks on, into the folder given as the first argument; further
 * arguments are context values (`tern:egress=static`).
 * Used by `make synth` so cfn-lint can check the template on a machine without
 * cargo-lambda, zig or Docker. Never contacts AWS.
 */
import * as path from 'path';
import { createApp } from '../lib/app';
import { TernStack } from '../lib/tern-stack';

const outdir = path.resolve(process.argv[2] ?? 'cdk.out.lint');
const context = Object.fromEntries(
  process.argv.slice(3).map((arg) => {
    const at = arg.indexOf('=');
    if (at < 1) throw new Error(`context arguments are key=value, got ${JSON.stringify(arg)}`);
    return [arg.slice(0, at), arg.slice(at + 1)];
  }),
);
const app = createApp({ skipBundling: true, outdir, context });
const stack = new TernStack(app, 'Tern', { alarmEmail: 'ops@example.com' });
const assembly = app.synth();
const template = assembly.getStackArtifact(stack.artifactId).templateFullPath;
process.stdout.write(`${template}\n`);
