/**
 * Props and context override settings.json; bad values are refused at synth;
 * prebuilt artifacts replace cargo-lambda; nothing needs cargo-lambda on PATH.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Template } from 'aws-cdk-lib/assertions';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { RustFunction } from 'cargo-lambda-cdk';
import { createApp } from '../lib/app';
import { loadSettings } from '../lib/settings';
import { TernStack, TernStackProps } from '../lib/tern-stack';
import { only, synth } from './helpers';

function build(props: TernStackProps = {}, context: Record<string, unknown> = {}): TernStack {
  const app = createApp({ skipBundling: true, nag: false, context, outdir: fs.mkdtempSync(path.join(os.tmpdir(), 'tern-cfg-')) });
  return new TernStack(app, 'Tern', props);
}

describe('overrides', () => {
  test('props override settings.json; a longer sender timeout raises the visibility timeout to 6x', () => {
    const { stack, json } = synth({ senderTimeoutSeconds: 90, senderMaxConcurrency: 50, retrySchedule: [30, 60], alarmEmail: undefined });
    const sender = json.Resources[stack.getLogicalId(stack.functions.sender.node.defaultChild as any)].Properties;
    expect(sender.Timeout).toBe(90);
    expect(sender.Environment.Variables.TERN_RETRY_SCHEDULE).toBe('30,60');
    const queue = json.Resources[stack.getLogicalId(stack.queues.delivery.node.defaultChild as any)].Properties;
    expect(queue.VisibilityTimeout).toBe(540);
    Template.fromJSON(json).hasResourceProperties('AWS::Lambda::EventSourceMapping', { ScalingConfig: { MaximumConcurrency: 50 } });
    Template.fromJSON(json).resourceCountIs('AWS::SNS::Subscription', 0);
  });

  test('context values (strings from -c) are read and typed', () => {
    const { stack, json } = synth({}, {
      'tern:senderBatchSize': '5',
      'tern:retrySchedule': '10, 20,30',
      'tern:retainData': 'false',
      'tern:alarmEmail': 'oncall@example.com',
      'tern:logRetentionDays': '90',
      'tern:attemptTimeoutMs': 20000,
    });
    const t = Template.fromJSON(json);
    // Half the batch, twice the concurrent batches for the same target (2,000/s x 0.5 s / 5).
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', { BatchSize: 5, ScalingConfig: { MaximumConcurrency: 200 } });
    t.hasResource('AWS::DynamoDB::Table', { DeletionPolicy: 'Delete' });
    t.hasResourceProperties('AWS::SNS::Subscription', { Endpoint: 'oncall@example.com' });
    t.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 90 });
    const env = json.Resources[stack.getLogicalId(stack.functions.sender.node.defaultChild as any)].Properties.Environment.Variables;
    expect(env.TERN_RETRY_SCHEDULE).toBe('10,20,30');
    expect(env.TERN_ATTEMPT_TIMEOUT_MS).toBe('20000');
  });

  test('NAT64: off by default (settings.json delivery.nat64), on by context or props, the sender env TERN_NAT64; SAM has the same switch', () => {
    const envOf = (props: TernStackProps, context: Record<string, unknown>) => {
      const stack = build(props, context);
      const json = Template.fromStack(stack).toJSON();
      return json.Resources[stack.getLogicalId(stack.functions.sender.node.defaultChild as any)].Properties.Environment.Variables;
    };
    expect(loadSettings().delivery.nat64).toBe(false);
    expect(envOf({}, {}).TERN_NAT64).toBe('false');
    expect(envOf({}, { 'tern:nat64': 'true' }).TERN_NAT64).toBe('true');
    expect(envOf({ nat64: true }, { 'tern:nat64': 'false' }).TERN_NAT64).toBe('true');
    expect(() => build({}, { 'tern:nat64': 'yes' })).toThrow(/tern:nat64/);
    const { samTemplate } = require('./helpers');
    const t = samTemplate();
    expect(t.Parameters.Nat64).toMatchObject({ Type: 'String', Default: String(loadSettings().delivery.nat64), AllowedValues: ['true', 'false'] });
    expect(t.Resources.SenderFunction.Properties.Environment.Variables.TERN_NAT64).toEqual({ Ref: 'Nat64' });
  });

  test('tracing: off by default (empty endpoint), the endpoint and ratio by context or props, in the relay, sender, replay and API env; SAM has the same parameters', () => {
    const envsOf = (props: TernStackProps, context: Record<string, unknown>) => {
      const stack = build(props, context);
      const json = Template.fromStack(stack).toJSON();
      const fns = stack.functions as any;
      return Object.fromEntries(
        ['relay', 'sender', 'replay', 'api', 'console'].map((f) => [
          f,
          json.Resources[stack.getLogicalId(fns[f].node.defaultChild)].Properties.Environment.Variables,
        ]),
      );
    };
    const off = envsOf({}, {});
    for (const f of ['relay', 'sender', 'replay', 'api']) {
      expect(off[f]).toMatchObject({
        OTEL_EXPORTER_OTLP_ENDPOINT: '',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.05',
      });
    }
    expect(off.console.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
    const on = envsOf({ traceSampleRatio: 0.25 }, { 'tern:otlpEndpoint': 'http://localhost:4318' });
    expect(on.sender).toMatchObject({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://localhost:4318', OTEL_TRACES_SAMPLER_ARG: '0.25' });
    expect(() => build({ otlpEndpoint: 'localhost:4318' }, {})).toThrow(/otlpEndpoint/);
    expect(() => build({ traceSampleRatio: 1.5 }, {})).toThrow(/traceSampleRatio/);
    const { samTemplate } = require('./helpers');
    const t = samTemplate();
    expect(t.Parameters.OtlpEndpoint).toMatchObject({ Type: 'String', Default: '' });
    expect(t.Parameters.TraceSampleRatio).toMatchObject({ Type: 'Number', Default: 0.05, MinValue: 0, MaxValue: 1 });
    for (const f of ['RelayFunction', 'SenderFunction', 'ReplayFunction', 'ApiFunction']) {
      expect(t.Resources[f].Properties.Environment.Variables).toMatchObject({
        OTEL_EXPORTER_OTLP_ENDPOINT: { Ref: 'OtlpEndpoint' },
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: { Ref: 'TraceSampleRatio' },
      });
    }
  });

  test('tracing on grants xray:PutTraceSegments (X-Ray OTLP endpoint) to the four traced roles only; off grants nothing; SAM the same behind TracingOn', () => {
    const xrayRoles = (props: TernStackProps, context: Record<string, unknown>) => {
      const stack = build(props, context);
      const json = Template.fromStack(stack).toJSON();
      const roles = stack.functions.roles as Record<string, any>;
      const byId = Object.fromEntries(Object.entries(roles).map(([name, role]) => [stack.getLogicalId(role.node.defaultChild), name]));
      const granted = new Set<string>();
      for (const r of Object.values(json.Resources) as any[]) {
        if (r.Type !== 'AWS::IAM::Policy') continue;
        const actions = (r.Properties.PolicyDocument.Statement as any[]).flatMap((st) => [st.Action].flat());
        if (!actions.includes('xray:PutTraceSegments')) continue;
        for (const role of r.Properties.Roles) granted.add(byId[role.Ref]);
      }
      return [...granted].sort();
    };
    expect(xrayRoles({}, {})).toEqual([]);
    expect(xrayRoles({}, { 'tern:otlpEndpoint': 'http://localhost:4318' })).toEqual(['api', 'relay', 'replay', 'sender']);
    const { samTemplate } = require('./helpers');
    const t = samTemplate();
    expect(t.Conditions.TracingOn).toEqual({ 'Fn::Not': [{ 'Fn::Equals': [{ Ref: 'OtlpEndpoint' }, ''] }] });
    const grant = {
      'Fn::If': [
        'TracingOn',
        { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: 'xray:PutTraceSegments', Resource: '*' }] },
        { Ref: 'AWS::NoValue' },
      ],
    };
    for (const f of ['RelayFunction', 'SenderFunction', 'ReplayFunction', 'ApiFunction']) {
      expect(t.Resources[f].Properties.Policies).toContainEqual(grant);
    }
    expect(t.Resources.ConsoleFunction.Properties.Policies).not.toContainEqual(grant);
  });

  test('health settings: settings.json by default, overridable by context and props, mapped to the sender env', () => {
    const envOf = (props: TernStackProps, context: Record<string, unknown>) => {
      const stack = build(props, context);
      const json = Template.fromStack(stack).toJSON();
      return json.Resources[stack.getLogicalId(stack.functions.sender.node.defaultChild as any)].Properties.Environment.Variables;
    };
    const env = envOf({ healthMinAttempts: 40 }, {
      'tern:healthFailureThreshold': '3',
      'tern:healthProbeIntervalSeconds': '30',
      'tern:healthWindowSeconds': '1800',
      'tern:healthDisableBelowPercent': '40',
      'tern:healthDegradedBelowPercent': '90',
      'tern:healthMinAttempts': '10',
      'tern:healthMaxPauseSeconds': '600',
    });
    expect(env).toMatchObject({
      TERN_HEALTH_FAILURE_THRESHOLD: '3',
      TERN_HEALTH_PROBE_INTERVAL_SECONDS: '30',
      TERN_HEALTH_WINDOW_SECONDS: '1800',
      TERN_HEALTH_DISABLE_BELOW_PERCENT: '40',
      TERN_HEALTH_DEGRADED_BELOW_PERCENT: '90',
      TERN_HEALTH_MIN_ATTEMPTS: '40',
      TERN_HEALTH_MAX_PAUSE_SECONDS: '600',
    });
  });

  test('health settings are bounded, and disabling cannot be looser than degrading', () => {
    expect(() => build({ healthDisableBelowPercent: 96 })).toThrow(/healthDisableBelowPercent \(96\) must be at most healthDegradedBelowPercent \(95\)/);
    expect(() => build({ healthFailureThreshold: 0 })).toThrow(/healthFailureThreshold must be an integer in 1..1000/);
    expect(() => build({ healthWindowSeconds: 30 })).toThrow(/healthWindowSeconds/);
    expect(() => build({ healthMaxPauseSeconds: 86401 })).toThrow(/healthMaxPauseSeconds/);
    expect(() => build({}, { 'tern:healthMinAttempts': 'many' })).toThrow(/tern:healthMinAttempts/);
  });

  test('SAM Health* parameters default to settings.json health and have the CDK ranges', () => {
    const { samTemplate } = require('./helpers');
    const p = samTemplate().Parameters;
    const s = loadSettings().health;
    const expected: Array<[string, number, number, number]> = [
      ['HealthFailureThreshold', s.failureThreshold, 1, 1000],
      ['HealthProbeIntervalSeconds', s.probeIntervalSeconds, 1, 3600],
      ['HealthWindowSeconds', s.windowSeconds, 60, 86400],
      ['HealthDisableBelowPercent', s.disableBelowPercent, 0, 100],
      ['HealthDegradedBelowPercent', s.degradedBelowPercent, 0, 100],
      ['HealthMinAttempts', s.minAttempts, 1, 100000],
      ['HealthMaxPauseSeconds', s.maxPauseSeconds, 1, 86400],
    ];
    for (const [name, def, min, max] of expected) {
      expect([name, p[name].Type, p[name].Default, p[name].MinValue, p[name].MaxValue]).toEqual([name, 'Number', def, min, max]);
    }
  });

  test('props win over context', () => {
    const stack = build({ senderBatchSize: 3 }, { 'tern:senderBatchSize': '7' });
    expect(stack.config.senderBatchSize).toBe(3);
  });

  test('explicit visibility timeout is kept when it is large enough', () => {
    expect(build({ deliveryVisibilityTimeoutSeconds: 900 }).config.deliveryVisibilityTimeoutSeconds).toBe(900);
  });
});

describe('refused settings', () => {
  test.each<[string, TernStackProps, RegExp]>([
    ['visibility below 6x the sender timeout', { deliveryVisibilityTimeoutSeconds: 300 }, /must be >= 6 x senderTimeoutSeconds/],
    ['attempt deadline not well below the sender timeout', { attemptTimeoutMs: 45000 }, /attemptTimeoutMs/],
    ['SQS batch above 10', { senderBatchSize: 11 }, /senderBatchSize/],
    ['maximum concurrency below 2', { senderMaxConcurrency: 1 }, /senderMaxConcurrency/],
    ['empty retry schedule', { retrySchedule: [] }, /retrySchedule/],
    ['fractional retry delay', { retrySchedule: [1.5] }, /retrySchedule/],
    ['log retention CloudWatch does not offer', { logRetentionDays: 31 }, /logRetentionDays/],
    ['Lambda timeout above 900 s', { replayTimeoutSeconds: 901 }, /replayTimeoutSeconds/],
    ['replay outliving its 330 s drain visibility', { replayTimeoutSeconds: 330 }, /replayTimeoutSeconds \(330\) must be below 330/],
  ])('%s', (_name, props, message) => {
    expect(() => build(props)).toThrow(message);
  });

  test.each(['oncall', 'oncall@example', 'on call@example.com', 'a@b@example.com'])('alarmEmail %j (props or -c) stops the synth', (email) => {
    expect(() => build({ alarmEmail: email })).toThrow(/alarmEmail must be an e-mail address/);
    expect(() => build({}, { 'tern:alarmEmail': email })).toThrow(/alarmEmail must be an e-mail address/);
  });

  test('a context value that is not a number', () => {
    expect(() => build({}, { 'tern:senderMaxConcurrency': 'many' })).toThrow(/tern:senderMaxConcurrency/);
  });

  test("API throttling: from the target by default, overridable by context and props, refused outside API Gateway's quota; SAM has the same parameters", () => {
    const stageOf = (props: TernStackProps, context: Record<string, unknown>) =>
      only(Template.fromStack(build(props, context)).toJSON() as any, 'AWS::ApiGatewayV2::Stage').props.DefaultRouteSettings;
    const s = build().config.capacity;
    expect(stageOf({}, {})).toEqual({ ThrottlingRateLimit: s.apiThrottlingRateLimit, ThrottlingBurstLimit: s.apiThrottlingBurstLimit });
    expect(stageOf({ apiThrottlingBurstLimit: 50 }, { 'tern:apiThrottlingRateLimit': '20', 'tern:apiThrottlingBurstLimit': '10' })).toEqual({
      ThrottlingRateLimit: 20,
      ThrottlingBurstLimit: 50,
    });
    expect(() => build({ apiThrottlingRateLimit: 0 })).toThrow(/apiThrottlingRateLimit/);
    expect(() => build({ apiThrottlingRateLimit: 10001 })).toThrow(/apiThrottlingRateLimit/);
    expect(() => build({}, { 'tern:apiThrottlingBurstLimit': '5001' })).toThrow(/apiThrottlingBurstLimit/);
    const { samTemplate } = require('./helpers');
    const t = samTemplate();
    // 0: from TargetDeliveriesPerSecond's row (the agreement tests compare the stages).
    expect(t.Parameters.ApiThrottlingRateLimit).toMatchObject({ Type: 'Number', Default: 0, MinValue: 0, MaxValue: 10000 });
    expect(t.Parameters.ApiThrottlingBurstLimit).toMatchObject({ Type: 'Number', Default: 0, MinValue: 0, MaxValue: 5000 });
  });

  test('portal frame ancestors: none by default, https origins from props or context, anything else refused; SAM has the same parameter', () => {
    const ancestorsOf = (props: TernStackProps, context: Record<string, unknown>) => {
      const fns = Object.values((Template.fromStack(build(props, context)).toJSON() as any).Resources).filter(
        (r: any) => r.Type === 'AWS::Lambda::Function' && r.Properties.Environment?.Variables?.TERN_PORTAL_TABLE,
      ) as any[];
      expect(fns).toHaveLength(1);
      return fns[0].Properties.Environment.Variables.TERN_PORTAL_FRAME_ANCESTORS;
    };
    expect(ancestorsOf({}, {})).toBe('');
    expect(ancestorsOf({}, { 'tern:portalFrameAncestors': 'https://app.example.com,https://b.example:8443' })).toBe(
      'https://app.example.com,https://b.example:8443',
    );
    for (const bad of ['http://app.example.com', 'https://app.example.com/path', "https://a.example; script-src *", '*']) {
      expect(() => build({ portalFrameAncestors: bad })).toThrow(/portalFrameAncestors/);
    }
    const { samTemplate } = require('./helpers');
    const p = samTemplate().Parameters.PortalFrameAncestors;
    expect(p).toMatchObject({ Type: 'String', Default: '' });
    const pattern = new RegExp(p.AllowedPattern);
    expect(pattern.test('https://app.example.com,https://b.example:8443')).toBe(true);
    expect(pattern.test('')).toBe(true);
    expect(pattern.test('http://app.example.com')).toBe(false);
    expect(pattern.test('https://a.example; script-src *')).toBe(false);
  });

  test.each([25, 30, 26.5])("settings.json: an api function timeout of %s s is refused (it must outlive the router's 25 s and end before API Gateway's 30 s)", (timeout) => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tern-settings-')), 'settings.json');
    const s = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'settings.json'), 'utf-8'));
    s.functions.api.timeoutSeconds = timeout;
    fs.writeFileSync(file, JSON.stringify(s));
    expect(() => loadSettings(file)).toThrow(/functions.api.timeoutSeconds/);
  });

  test('settings.json with a missing number', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tern-settings-')), 'settings.json');
    const s = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'settings.json'), 'utf-8'));
    delete s.queues.delivery.maxReceiveCount;
    fs.writeFileSync(file, JSON.stringify(s));
    expect(() => loadSettings(file)).toThrow(/queues.delivery.maxReceiveCount/);
  });
});

describe('function code', () => {
  test('default: RustFunction (cargo-lambda-cdk) bundling, synthesized with no cargo-lambda, cargo or zig on PATH', () => {
    const emptyBin = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-empty-path-'));
    const savedPath = process.env.PATH;
    const { Bundling } = require('cargo-lambda-cdk/lib/bundling');
    process.env.PATH = emptyBin;
    try {
      Bundling.clearRunsLocallyCache();
      const stack = build();
      const t = Template.fromStack(stack);
      expect(stack.functions.sender).toBeInstanceOf(RustFunction);
      t.resourceCountIs('AWS::Lambda::Function', 5);
      t.allResourcesProperties('AWS::Lambda::Function', { Handler: 'bootstrap', Runtime: 'provided.al2023', Architectures: ['arm64'] });
    } finally {
      process.env.PATH = savedPath;
      Bundling.clearRunsLocallyCache();
    }
  });

  test('prebuiltArtifactsDir: ships target/lambda/<bin>/ as built by cargo lambda build', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-prebuilt-'));
    for (const bin of ['relay', 'sender', 'replay', 'console', 'api']) {
      fs.mkdirSync(path.join(dir, bin));
      fs.writeFileSync(path.join(dir, bin, 'bootstrap'), `#!/bin/sh\necho placeholder ${bin}\n`, { mode: 0o755 });
    }
    const { stack, json } = synth({ prebuiltArtifactsDir: dir });
    for (const fn of [stack.functions.relay, stack.functions.sender, stack.functions.replay, stack.functions.console, stack.functions.api]) {
      expect(fn).toBeInstanceOf(lambda.Function);
      expect(fn).not.toBeInstanceOf(RustFunction);
    }
    const relay = only(json, 'AWS::Lambda::Function', 'FunctionsRelay').props;
    expect(relay).toMatchObject({ Handler: 'bootstrap', Runtime: 'provided.al2023', Architectures: ['arm64'], Timeout: 30 });
    expect(relay.Code.S3Key).toMatch(/\.zip$/);
  });
});
