import * as fs from 'fs';
import * as path from 'path';
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { INFRA_DIR } from './settings';

/** The `context` of infra/cdk.json (feature flags), so tests and scripts synthesize what `cdk` would. */
export function cdkJsonContext(): Record<string, unknown> {
  const cdkJson = JSON.parse(fs.readFileSync(path.join(INFRA_DIR, 'cdk.json'), 'utf-8'));
  return cdkJson.context ?? {};
}

export interface TernAppOptions {
  /** Extra context (e.g. `tern:*` settings); wins over cdk.json. */
  readonly context?: Record<string, unknown>;
  /**
   * Skip asset bundling (no cargo-lambda, zig or Docker needed): the functions' code
   * then points at the workspace without building it. For tests and linting only.
   */
  readonly skipBundling?: boolean;
  /** Run the cdk-nag AwsSolutions pack as a validation plugin (synthesis fails on a finding). Default: true. */
  readonly nag?: boolean;
  /** Cloud assembly folder. Default: a temporary folder (CDK's default for an App outside the CLI). */
  readonly outdir?: string;
}

/** An App with cdk.json's context and, unless turned off, the cdk-nag AwsSolutions checks. */
export function createApp(opts: TernAppOptions = {}): App {
  const context: Record<string, unknown> = { ...cdkJsonContext(), ...(opts.context ?? {}) };
  if (opts.skipBundling) context['aws:cdk:bundling-stacks'] = [];
  const app = new App({ context, outdir: opts.outdir });
  if (opts.nag ?? true) addNag(app);
  return app;
}

/** Registers the cdk-nag AwsSolutions pack: a finding that is not acknowledged stops synthesis. */
export function addNag(app: App): void {
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
}
