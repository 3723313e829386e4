/**
 * Shared test helpers: synthesize the stack without building Rust (bundling
 * skipped: no cargo-lambda, zig or Docker needed) and read template.yaml.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Template } from 'aws-cdk-lib/assertions';
import * as YAML from 'yaml';
import { createApp } from '../lib/app';
import { TernStack, TernStackProps } from '../lib/tern-stack';
import { INFRA_DIR, loadSettings, TernSettings } from '../lib/settings';

export const settings: TernSettings = loadSettings();

export interface Synthesized {
  readonly stack: TernStack;
  readonly template: Template;
  /** The raw CloudFormation JSON. */
  readonly json: CfnTemplate;
  /** The cloud assembly folder (assets staged there). */
  readonly outdir: string;
}

export type CfnTemplate = {
  Resources: Record<string, { Type: string; Properties?: any; Metadata?: any; DeletionPolicy?: string; UpdateReplacePolicy?: string; Condition?: string }>;
  Parameters?: Record<string, { Type: string; Default?: unknown }>;
  Conditions?: Record<string, unknown>;
  Mappings?: Record<string, Record<string, Record<string, unknown>>>;
  Outputs?: Record<string, any>;
  [k: string]: unknown;
};

/** A fresh app (no cdk-nag plugin: tests call the pack themselves) and one Tern stack. */
export function synth(props: TernStackProps = {}, context: Record<string, unknown> = {}): Synthesized {
  const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-cdk-test-'));
  const app = createApp({ skipBundling: true, nag: false, context, outdir });
  const stack = new TernStack(app, 'Tern', props);
  const template = Template.fromStack(stack);
  return { stack, template, json: template.toJSON() as CfnTemplate, outdir };
}

/**
 * Context of a stack sized for `size` deliveries per second. Above 10,000 the sender reserves
 * more than a default account (1,000, 100 of it unreserved) can give: the context then states
 * a raised Lambda concurrency quota, as a deployment of that size must.
 */
export function sizeContext(size: number): Record<string, unknown> {
  return { 'tern:targetDeliveriesPerSecond': size, ...(size > 10000 ? { 'tern:lambdaConcurrencyQuota': 5000 } : {}) };
}

let cached: Synthesized | undefined;
/** The default stack (settings.json only, with an alarm e-mail), synthesized once per test file. */
export function defaultStack(): Synthesized {
  cached ??= synth({ alarmEmail: 'ops@example.com' });
  return cached;
}

/** Logical ids of the resources of one type whose id starts with a prefix (CDK ids are path-derived). */
export function logicalIds(t: CfnTemplate, type: string, prefix = ''): string[] {
  return Object.entries(t.Resources)
    .filter(([id, r]) => r.Type === type && id.startsWith(prefix))
    .map(([id]) => id);
}

/** The one resource of a type whose logical id starts with a prefix. */
export function only(t: CfnTemplate, type: string, prefix = ''): { id: string; props: any } {
  const ids = logicalIds(t, type, prefix);
  if (ids.length !== 1) throw new Error(`expected one ${type} starting with ${prefix}, found ${ids.join(', ') || 'none'}`);
  return { id: ids[0], props: t.Resources[ids[0]].Properties ?? {} };
}

/** CloudFormation short-form tags (!Ref, !GetAtt, !Sub, ...) as their long-form objects. */
const cfnTags: YAML.Tags = ['Ref', 'GetAtt', 'Sub', 'Join', 'If', 'Not', 'Equals', 'And', 'Or', 'Select', 'Split', 'FindInMap', 'ImportValue', 'GetAZs', 'Base64', 'Cidr', 'Condition'].flatMap((name) => {
  const key = name === 'Ref' || name === 'Condition' ? name : `Fn::${name}`;
  const toValue = (v: unknown) => (name === 'GetAtt' && typeof v === 'string' ? v.split('.') : v);
  return (['scalar', 'seq', 'map'] as const).map((collection) => ({
    tag: `!${name}`,
    collection: collection === 'scalar' ? undefined : collection,
    identify: () => false,
    resolve: (value: any) => ({ [key]: toValue(collection === 'scalar' ? value : value.toJSON()) }),
  })) as YAML.Tags;
});

/** infra/template.yaml as plain JSON (short-form intrinsics expanded). */
export function samTemplate(): CfnTemplate {
  const text = fs.readFileSync(path.join(INFRA_DIR, 'template.yaml'), 'utf-8');
  return YAML.parse(text, { customTags: cfnTags }) as CfnTemplate;
}

/**
 * The widgets of the template's one dashboard, its body's intrinsics flattened: the CDK
 * body is an Fn::Join, template.yaml's an Fn::Sub. A reference to the console function's
 * ARN (logical id `consoleId`) becomes "CONSOLE_ARN", any other reference "REF".
 */
export function dashboardWidgets(t: CfnTemplate, consoleId: string): any[] {
  const body = only(t, 'AWS::CloudWatch::Dashboard').props.DashboardBody;
  let text: string;
  if (body['Fn::Join']) {
    const [sep, parts] = body['Fn::Join'];
    text = (parts as unknown[])
      .map((p) => {
        if (typeof p === 'string') return p;
        const getAtt = (p as any)['Fn::GetAtt'];
        return getAtt && getAtt[0] === consoleId && getAtt[1] === 'Arn' ? 'CONSOLE_ARN' : 'REF';
      })
      .join(sep);
  } else if (body['Fn::Sub']) {
    const sub = body['Fn::Sub'];
    const template: string = Array.isArray(sub) ? sub[0] : sub;
    text = template.replace(/\$\{([^}]+)\}/g, (_m, name: string) => (name === `${consoleId}.Arn` ? 'CONSOLE_ARN' : 'REF'));
  } else {
    text = body;
  }
  return JSON.parse(text).widgets;
}

/**
 * A template.yaml function's policy statements at the template's defaults: an `Fn::If` entry
 * (the xray:PutTraceSegments grant behind TracingOn, off while OtlpEndpoint is empty, as in
 * the default CDK stack) is left out; tests of tracing check that entry itself.
 */
export function samPolicyStatements(t: CfnTemplate, fn: string): any[] {
  return t.Resources[fn].Properties.Policies.flatMap((p: any) => (p['Fn::If'] ? [] : p.Statement));
}

