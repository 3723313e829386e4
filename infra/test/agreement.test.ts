/**
 * The CDK app and template.yaml deploy the same system: timeouts, memory, batch
 * sizes, redrive, visibility timeout, stream and mapping settings, alarms.
 */
import { CfnElement } from 'aws-cdk-lib';
import { deriveCapacity, SAM_SIZES } from '../lib/capacity';
import { dashboardWidgets, defaultStack, samTemplate, settings, sizeContext, synth, CfnTemplate } from './helpers';
import { critical, Critical, flattenText, Names, normalizeValue, samEventToMapping } from './normalize';

function cdkCritical(mode?: 'on-demand' | 'provisioned', size?: number): Critical {
  const { stack, json } =
    mode || size
      ? synth({ alarmEmail: 'ops@example.com' }, { ...(mode ? { 'tern:tableCapacityMode': mode } : {}), ...(size ? sizeContext(size) : {}) })
      : defaultStack();
  const id = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
  const names: Names = {
    [id(stack.storage.outbox)]: 'outbox',
    [id(stack.storage.endpoints)]: 'endpoints',
    [id(stack.storage.attempts)]: 'attempts',
    [id(stack.storage.health)]: 'health',
    [id(stack.portal.table)]: 'portal',
    [id(stack.portal.keys)]: 'portalKeys',
    [id(stack.storage.secretsKey)]: 'secretsKey',
    [id(stack.operational.topic)]: 'operationalTopic',
    [id(stack.queues.delivery)]: 'delivery',
    [id(stack.queues.dlq)]: 'dlq',
    [id(stack.queues.relayFailures)]: 'relayFailures',
    [id(stack.delayedDelivery.stateMachine)]: 'stateMachine',
    [id(stack.functions.relay)]: 'relay',
    [id(stack.functions.sender)]: 'sender',
    [id(stack.functions.replay)]: 'replay',
    [id(stack.functions.console)]: 'console',
    [id(stack.functions.api)]: 'api',
    [id(stack.api.httpApi)]: 'httpApi',
    [id(stack.alarms.topic)]: 'topic',
  };
  const mappings: Record<string, Record<string, unknown>> = {};
  for (const r of Object.values(json.Resources).filter((r) => r.Type === 'AWS::Lambda::EventSourceMapping')) {
    const { FunctionName, ...rest } = r.Properties;
    mappings[names[FunctionName.Ref]] = rest;
  }
  const sm = json.Resources[id(stack.delayedDelivery.stateMachine)].Properties;
  return critical(json, names, mappings, sm.StateMachineType);
}

function samCritical(mode?: 'on-demand' | 'provisioned', size?: number): Critical {
  const t: CfnTemplate = samTemplate();
  if (mode) t.Parameters!.TableCapacityMode.Default = mode;
  if (size) t.Parameters!.TargetDeliveriesPerSecond.Default = size;
  const names: Names = {
    OutboxTable: 'outbox',
    EndpointsTable: 'endpoints',
    AttemptsTable: 'attempts',
    HealthTable: 'health',
    PortalTable: 'portal',
    PortalKeySecret: 'portalKeys',
    EndpointSecretsKey: 'secretsKey',
    OperationalTopic: 'operationalTopic',
    DeliveryQueue: 'delivery',
    Dlq: 'dlq',
    RelayFailureQueue: 'relayFailures',
    DelayedDeliveryStateMachine: 'stateMachine',
    RelayFunction: 'relay',
    SenderFunction: 'sender',
    ReplayFunction: 'replay',
    ConsoleFunction: 'console',
    ApiFunction: 'api',
    HttpApi: 'httpApi',
    AlarmTopic: 'topic',
  };
  const mappings: Record<string, Record<string, unknown>> = {};
  for (const fn of ['relay', 'sender', 'replay']) {
    const logicalId = Object.keys(names).find((k) => names[k] === fn)!;
    for (const event of Object.values(t.Resources[logicalId].Properties.Events ?? {})) {
      mappings[fn] = samEventToMapping(event as any);
    }
  }
  return critical(t, names, mappings, t.Resources.DelayedDeliveryStateMachine.Properties.Type);
}

describe('CDK and SAM templates agree', () => {
  const cdk = cdkCritical();
  const sam = samCritical();

  test.each(['relay', 'sender', 'replay', 'console', 'api'])('function %s: runtime, arch, timeout, memory, environment', (fn) => {
    expect(sam.functions[fn]).toEqual(cdk.functions[fn]);
  });

  test.each(['outbox', 'endpoints', 'attempts', 'health', 'portal'])('table %s: keys, stream, TTL, PITR, SSE, retention policy', (tbl) => {
    expect(sam.tables[tbl]).toEqual(cdk.tables[tbl]);
  });

  test('tables are on-demand by default in both, with no auto scaling', () => {
    expect(settings.capacity.mode).toBe('on-demand');
    for (const c of [cdk, sam]) {
      for (const tbl of ['outbox', 'endpoints', 'attempts', 'health']) {
        expect(c.tables[tbl]).toMatchObject({ BillingMode: 'PAY_PER_REQUEST' });
        expect((c.tables[tbl] as any).ProvisionedThroughput).toBeUndefined();
      }
      expect(c.capacity).toEqual({});
    }
  });

  test.each(['on-demand', 'provisioned'] as const)('table capacity mode %s: billing, capacity and auto scaling agree', (mode) => {
    const c = cdkCritical(mode);
    const s = samCritical(mode);
    expect(s.tables).toEqual(c.tables);
    expect(s.capacity).toEqual(c.capacity);
  });

  test.each([...SAM_SIZES])('size %d: the sender mapping, its reserved concurrency, the relay mapping and provisioned capacity agree', (size) => {
    for (const mode of ['on-demand', 'provisioned'] as const) {
      const c = cdkCritical(mode, size);
      const s = samCritical(mode, size);
      expect(s.mappings).toEqual(c.mappings);
      expect(s.functions.sender).toEqual(c.functions.sender);
      expect(s.tables).toEqual(c.tables);
      expect(s.capacity).toEqual(c.capacity);
    }
    const plan = deriveCapacity(size, { senderBatchSize: 10, targetUtilizationPercent: 70, minimum: settings.capacity.minimum });
    const c = cdkCritical('provisioned', size);
    expect(c.mappings.sender).toMatchObject({ ScalingConfig: { MaximumConcurrency: plan.senderMaxConcurrency } });
    expect(c.mappings.relay).toMatchObject({ ParallelizationFactor: plan.relayParallelizationFactor });
    expect(c.functions.sender).toMatchObject({ ReservedConcurrentExecutions: plan.senderReservedConcurrency });
    expect(c.capacity.attempts['dynamodb:table:WriteCapacityUnits']).toMatchObject({ MaxCapacity: plan.tables.attempts.write.max });
  });

  test('provisioned mode: every table and the waiting index scale reads and writes from settings.json minima to the derived maxima', () => {
    const c = cdkCritical('provisioned');
    const cap = settings.capacity;
    const plan = deriveCapacity(cap.targetDeliveriesPerSecond, {
      senderBatchSize: settings.eventSources.sender.batchSize,
      targetUtilizationPercent: cap.targetUtilizationPercent,
      minimum: cap.minimum,
    });
    for (const tbl of ['outbox', 'endpoints', 'attempts', 'health'] as const) {
      const range = plan.tables[tbl];
      expect(c.tables[tbl]).toMatchObject({
        BillingMode: 'PROVISIONED',
        ProvisionedThroughput: { ReadCapacityUnits: range.read.min, WriteCapacityUnits: range.write.min },
      });
      const policy = (metric: string) => [
        { PolicyType: 'TargetTrackingScaling', TargetValue: cap.targetUtilizationPercent, PredefinedMetricType: metric },
      ];
      const scaling = (kind: 'table' | 'index', r: typeof range) => ({
        [`dynamodb:${kind}:ReadCapacityUnits`]: {
          ServiceNamespace: 'dynamodb',
          MinCapacity: r.read.min,
          MaxCapacity: r.read.max,
          Policies: policy('DynamoDBReadCapacityUtilization'),
        },
        [`dynamodb:${kind}:WriteCapacityUnits`]: {
          ServiceNamespace: 'dynamodb',
          MinCapacity: r.write.min,
          MaxCapacity: r.write.max,
          Policies: policy('DynamoDBWriteCapacityUtilization'),
        },
      });
      // The attempts table's waiting index scales in its own ranges, the health table's
      // tenant index in the health table's.
      const indexed = tbl === 'attempts' || tbl === 'health';
      const index = tbl === 'attempts' ? plan.tables.waitingIndex : range;
      expect(c.capacity[tbl]).toEqual(indexed ? { ...scaling('table', range), ...scaling('index', index) } : scaling('table', range));
      if (indexed) {
        expect((c.tables[tbl] as any).GlobalSecondaryIndexes[0].ProvisionedThroughput).toEqual({
          ReadCapacityUnits: index.read.min,
          WriteCapacityUnits: index.write.min,
        });
      }
    }
  });

  test.each(['delivery', 'dlq', 'relayFailures'])('queue %s: visibility, retention, redrive, SSE', (q) => {
    expect(sam.queues[q]).toEqual(cdk.queues[q]);
  });

  test('every queue is TLS-only in both', () => {
    expect(cdk.tlsOnlyQueues).toEqual(['delivery', 'dlq', 'relayFailures']);
    expect(sam.tlsOnlyQueues).toEqual(cdk.tlsOnlyQueues);
  });

  test('relay stream mapping settings', () => {
    expect(sam.mappings.relay).toEqual(cdk.mappings.relay);
  });

  test('sender queue mapping settings', () => {
    expect(sam.mappings.sender).toEqual(cdk.mappings.sender);
  });

  test('only relay and sender have mappings', () => {
    expect(Object.keys(cdk.mappings).sort()).toEqual(['relay', 'sender']);
    expect(Object.keys(sam.mappings).sort()).toEqual(['relay', 'sender']);
  });

  test('state machine type', () => {
    expect(cdk.stateMachine).toEqual({ Type: 'STANDARD' });
    expect(sam.stateMachine).toEqual(cdk.stateMachine);
  });

  test('alarms: same metrics, statistics, periods, thresholds and actions', () => {
    expect(cdk.alarms).toHaveLength(17);
    expect(sam.alarms).toEqual(cdk.alarms);
  });

  test("dashboard: the same console widgets (params, size, place) calling the console function", () => {
    const { stack, json } = defaultStack();
    const cdkId = stack.getLogicalId(stack.functions.console.node.defaultChild as CfnElement);
    const strip = (ws: any[]) =>
      ws.map((w) => ({ type: w.type, x: w.x, y: w.y, width: w.width, height: w.height, title: w.properties.title, endpoint: w.properties.endpoint, params: w.properties.params, updateOn: w.properties.updateOn, insightRule: w.properties.insightRule, period: w.properties.period, stat: w.properties.stat }));
    const cdk = strip(dashboardWidgets(json, cdkId));
    const sam = strip(dashboardWidgets(samTemplate(), 'ConsoleFunction'));
    expect(cdk.filter((w) => w.type === 'custom')).toHaveLength(5);
    expect(sam).toEqual(cdk);
  });

  test('console role: the same statements in both', () => {
    const { stack, json } = defaultStack();
    const roleId = json.Resources[stack.getLogicalId(stack.functions.console.node.defaultChild as CfnElement)].Properties.Role['Fn::GetAtt'][0];
    const names: Names = {
      [stack.getLogicalId(stack.queues.dlq.node.defaultChild as CfnElement)]: 'dlq',
      [stack.getLogicalId(stack.storage.endpoints.node.defaultChild as CfnElement)]: 'endpoints',
      [stack.getLogicalId(stack.storage.attempts.node.defaultChild as CfnElement)]: 'attempts',
      [stack.getLogicalId(stack.storage.health.node.defaultChild as CfnElement)]: 'health',
      [stack.getLogicalId(stack.functions.replay.node.defaultChild as CfnElement)]: 'replay',
      [stack.getLogicalId(stack.storage.outbox.node.defaultChild as CfnElement)]: 'outbox',
      [stack.getLogicalId(stack.queues.relayFailures.node.defaultChild as CfnElement)]: 'relayFailures',
      [stack.getLogicalId(stack.queues.delivery.node.defaultChild as CfnElement)]: 'delivery',
    };
    const pairs = (statements: any[], n: Names) =>
      statements
        .flatMap((s) => [s.Action].flat().flatMap((a: string) => [s.Resource].flat().map((r: any) => `${a} on ${JSON.stringify(normalizeValue(r, n, json))}`)))
        .filter((p) => !p.startsWith('logs:'))
        .sort();
    const cdkStatements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement);
    const t = samTemplate();
    const samStatements = t.Resources.ConsoleFunction.Properties.Policies.flatMap((p: any) => p.Statement);
    const samNames: Names = {
      Dlq: 'dlq',
      EndpointsTable: 'endpoints',
      AttemptsTable: 'attempts',
      HealthTable: 'health',
      ReplayFunction: 'replay',
      OutboxTable: 'outbox',
      RelayFailureQueue: 'relayFailures',
      DeliveryQueue: 'delivery',
    };
    expect(pairs(samStatements, samNames)).toEqual(pairs(cdkStatements, names));
  });

  test('replay role: the same statements, conditions included, in both', () => {
    const { stack, json } = defaultStack();
    const roleId = json.Resources[stack.getLogicalId(stack.functions.replay.node.defaultChild as CfnElement)].Properties.Role['Fn::GetAtt'][0];
    const names: Names = {
      [stack.getLogicalId(stack.queues.dlq.node.defaultChild as CfnElement)]: 'dlq',
      [stack.getLogicalId(stack.queues.delivery.node.defaultChild as CfnElement)]: 'delivery',
      [stack.getLogicalId(stack.storage.attempts.node.defaultChild as CfnElement)]: 'attempts',
    };
    const pairs = (statements: any[], n: Names) =>
      statements
        .flatMap((s) =>
          [s.Action].flat().flatMap((a: string) =>
            [s.Resource].flat().map((r: any) => `${a} on ${JSON.stringify(normalizeValue(r, n, json))} if ${JSON.stringify(s.Condition ?? {})}`),
          ),
        )
        .filter((p) => !p.startsWith('logs:'))
        // CDK's queue grant adds the reads a consumer needs; SAM names the three it uses.
        .filter((p) => !/^sqs:(GetQueueAttributes|GetQueueUrl) /.test(p))
        .sort();
    const cdkStatements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement);
    const t = samTemplate();
    const samStatements = t.Resources.ReplayFunction.Properties.Policies.flatMap((p: any) => p.Statement);
    const samNames: Names = { Dlq: 'dlq', DeliveryQueue: 'delivery', AttemptsTable: 'attempts' };
    const sam = pairs(samStatements, samNames);
    expect(sam.filter((p) => p.startsWith('dynamodb:DeleteItem'))).toEqual([
      'dynamodb:DeleteItem on "attempts.Arn" if {"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["dl#*"]}}',
    ]);
    expect(sam).toEqual(pairs(cdkStatements, names));
  });

  test('sender role: the same statements in both', () => {
    const { stack, json } = defaultStack();
    const lid = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
    const roleId = json.Resources[lid(stack.functions.sender)].Properties.Role['Fn::GetAtt'][0];
    const names: Names = {
      [lid(stack.storage.outbox)]: 'outbox',
      [lid(stack.storage.endpoints)]: 'endpoints',
      [lid(stack.storage.attempts)]: 'attempts',
      [lid(stack.storage.health)]: 'health',
      [lid(stack.operational.topic)]: 'operationalTopic',
      [lid(stack.queues.delivery)]: 'delivery',
      [lid(stack.queues.dlq)]: 'dlq',
      [lid(stack.delayedDelivery.stateMachine)]: 'stateMachine',
      [lid(stack.storage.secretsKey)]: 'secretsKey',
    };
    const pairs = (statements: any[], n: Names, t: CfnTemplate) =>
      statements
        .flatMap((s) => [s.Action].flat().flatMap((a: string) => [s.Resource].flat().map((r: any) => `${a} on ${JSON.stringify(normalizeValue(r, n, t))}`)))
        .filter((p) => !p.startsWith('logs:'))
        // The SQS mapping's consume grant is added by SAM from the Events entry, not written in the
        // template. ChangeMessageVisibility is kept: the sender calls it itself (a put-back SQS did
        // not take), and SAM's managed policy for the SQS event does not grant it.
        .filter((p) => !/^sqs:(ReceiveMessage|DeleteMessage|GetQueueAttributes|GetQueueUrl) /.test(p))
        .filter((p, i, all) => all.indexOf(p) === i)
        .sort();
    const cdkStatements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement);
    const t = samTemplate();
    const samStatements = t.Resources.SenderFunction.Properties.Policies.flatMap((p: any) => p.Statement);
    const samNames: Names = {
      OutboxTable: 'outbox',
      EndpointsTable: 'endpoints',
      AttemptsTable: 'attempts',
      HealthTable: 'health',
      OperationalTopic: 'operationalTopic',
      DeliveryQueue: 'delivery',
      Dlq: 'dlq',
      DelayedDeliveryStateMachine: 'stateMachine',
      EndpointSecretsKey: 'secretsKey',
    };
    expect(pairs(samStatements, samNames, t)).toEqual(pairs(cdkStatements, names, json));
  });

  test('relay role: the same statements, conditions included, in both', () => {
    const { stack, json } = defaultStack();
    const lid = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
    const roleId = json.Resources[lid(stack.functions.relay)].Properties.Role['Fn::GetAtt'][0];
    const names: Names = {
      [lid(stack.storage.endpoints)]: 'endpoints',
      [lid(stack.storage.attempts)]: 'attempts',
      [lid(stack.queues.delivery)]: 'delivery',
      [lid(stack.queues.relayFailures)]: 'relayFailures',
    };
    const pairs = (statements: any[], n: Names, t: CfnTemplate) =>
      statements
        .flatMap((s) =>
          [s.Action].flat().flatMap((a: string) =>
            [s.Resource].flat().map((r: any) => `${a} on ${JSON.stringify(normalizeValue(r, n, t))} if ${JSON.stringify(s.Condition ?? {})}`),
          ),
        )
        .filter((p) => !p.startsWith('logs:'))
        // Added by the stream mapping and its OnFailure destination (SAM adds them from the Events entry).
        .filter((p) => !/^dynamodb:(DescribeStream|GetRecords|GetShardIterator|ListStreams) /.test(p))
        .filter((p) => !/^sqs:(GetQueueAttributes|GetQueueUrl) /.test(p))
        .sort();
    const cdkStatements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement);
    const t = samTemplate();
    const samStatements = t.Resources.RelayFunction.Properties.Policies.flatMap((p: any) => p.Statement);
    const samNames: Names = {
      EndpointsTable: 'endpoints',
      AttemptsTable: 'attempts',
      DeliveryQueue: 'delivery',
      RelayFailureQueue: 'relayFailures',
    };
    expect([...new Set(pairs(samStatements, samNames, t))]).toEqual([...new Set(pairs(cdkStatements, names, json))]);
  });

  test('api role: the same statements in both', () => {
    const { stack, json } = defaultStack();
    const lid = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
    const roleId = json.Resources[lid(stack.functions.api)].Properties.Role['Fn::GetAtt'][0];
    const names: Names = {
      [lid(stack.storage.outbox)]: 'outbox',
      [lid(stack.storage.endpoints)]: 'endpoints',
      [lid(stack.storage.attempts)]: 'attempts',
      [lid(stack.storage.health)]: 'health',
      [lid(stack.portal.table)]: 'portal',
      [lid(stack.portal.keys)]: 'portalKeys',
      [lid(stack.queues.delivery)]: 'delivery',
      [lid(stack.queues.dlq)]: 'dlq',
      [lid(stack.storage.secretsKey)]: 'secretsKey',
    };
    const pairs = (statements: any[], n: Names, t: CfnTemplate) =>
      statements
        .flatMap((s) => [s.Action].flat().flatMap((a: string) => [s.Resource].flat().map((r: any) => `${a} on ${JSON.stringify(normalizeValue(r, n, t))}`)))
        .filter((p) => !p.startsWith('logs:'))
        .sort();
    const cdkStatements = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement);
    const t = samTemplate();
    const samStatements = t.Resources.ApiFunction.Properties.Policies.flatMap((p: any) => p.Statement);
    const samNames: Names = {
      OutboxTable: 'outbox',
      EndpointsTable: 'endpoints',
      AttemptsTable: 'attempts',
      HealthTable: 'health',
      PortalTable: 'portal',
      PortalKeySecret: 'portalKeys',
      DeliveryQueue: 'delivery',
      Dlq: 'dlq',
      EndpointSecretsKey: 'secretsKey',
    };
    const sam = pairs(samStatements, samNames, t);
    // 20, the dead-letter record's BatchGetItem and DeleteItem on the attempts table, and
    // enable's reset putting back what it keeps of a health item (UpdateItem), and the
    // waiting index's Query (an endpoint's health), and the Decrypt of endpoint secrets
    // sealed before the keyring (its own encryption-context condition, issue 29).
    expect(sam).toHaveLength(25);
    expect(sam).toEqual(pairs(cdkStatements, names, json));
  });

  test('the Tern API: the same HTTP API, route, authorization, integration, invoke permission, stage, access log and ApiUrl in both', () => {
    const { stack, json } = defaultStack();
    const lid = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
    const summary = (t: CfnTemplate, names: Names) => {
      const n = (v: unknown) => normalizeValue(v, names, t);
      const ofType = (type: string) => Object.entries(t.Resources).filter(([, r]) => r.Type === type);
      const apis = ofType('AWS::ApiGatewayV2::Api').map(([, r]) => ({ ProtocolType: r.Properties.ProtocolType, Name: flattenText(r.Properties.Name, names) }));
      const integrations = Object.fromEntries(
        ofType('AWS::ApiGatewayV2::Integration').map(([id, r]) => [
          id,
          { ApiId: n(r.Properties.ApiId), IntegrationType: r.Properties.IntegrationType, IntegrationUri: n(r.Properties.IntegrationUri), PayloadFormatVersion: r.Properties.PayloadFormatVersion, TimeoutInMillis: r.Properties.TimeoutInMillis },
        ]),
      );
      const integrationNames: Names = Object.fromEntries(Object.keys(integrations).map((id) => [id, 'integration']));
      const routes = ofType('AWS::ApiGatewayV2::Route').map(([, r]) => ({
        ApiId: n(r.Properties.ApiId),
        RouteKey: r.Properties.RouteKey,
        AuthorizationType: r.Properties.AuthorizationType,
        Target: flattenText(r.Properties.Target, { ...names, ...integrationNames }),
      }));
      const permissions = ofType('AWS::Lambda::Permission')
        .filter(([, r]) => r.Properties.Principal === 'apigateway.amazonaws.com')
        .map(([, r]) => ({ FunctionName: n(r.Properties.FunctionName), Action: r.Properties.Action, SourceArn: flattenText(r.Properties.SourceArn, names) }));
      const stages = ofType('AWS::ApiGatewayV2::Stage').map(([, r]) => {
        const p = r.Properties;
        const logGroup = t.Resources[p.AccessLogSettings.DestinationArn['Fn::GetAtt'][0]];
        return {
          ApiId: n(p.ApiId),
          StageName: p.StageName,
          AutoDeploy: p.AutoDeploy,
          DefaultRouteSettings: n(p.DefaultRouteSettings),
          AccessLogFormat: p.AccessLogSettings.Format,
          AccessLogGroup: { Type: logGroup.Type, RetentionInDays: n(logGroup.Properties.RetentionInDays) },
        };
      });
      return { apis, integrations: Object.values(integrations), routes, permissions, stages, apiUrl: n(t.Outputs!.ApiUrl.Value), apiUrlExport: flattenText(t.Outputs!.ApiUrl.Export.Name, names) };
    };
    const cdk = summary(json, { [lid(stack.api.httpApi)]: 'httpApi', [lid(stack.functions.api)]: 'api', 'AWS::StackName': 'stack' });
    // CDK writes the stack name as a literal ('Tern'); template.yaml as ${AWS::StackName}.
    const sam = summary(samTemplate(), { HttpApi: 'httpApi', ApiFunction: 'api' });
    const withStackName = JSON.parse(JSON.stringify(sam).split('${AWS::StackName}').join('Tern'));
    expect(withStackName).toEqual(cdk);
    expect(cdk.routes).toEqual([
      { ApiId: 'ref:httpApi', RouteKey: 'ANY /{proxy+}', AuthorizationType: 'AWS_IAM', Target: 'integrations/${integration}' },
      // The customer portal's pages: the function authenticates them by its own signed cookie.
      { ApiId: 'ref:httpApi', RouteKey: 'ANY /portal/{proxy+}', AuthorizationType: 'NONE', Target: 'integrations/${integration}' },
    ]);
    expect(cdk.stages[0].DefaultRouteSettings).toEqual({
      ThrottlingRateLimit: stack.config.capacity.apiThrottlingRateLimit,
      ThrottlingBurstLimit: stack.config.capacity.apiThrottlingBurstLimit,
    });
    expect(cdk.apiUrl).toBe('httpApi.ApiEndpoint');
  });

  test('operational topic: encrypted with the AWS managed SNS key and TLS-only in both', () => {
    const { stack, json } = defaultStack();
    const cdkId = stack.getLogicalId(stack.operational.topic.node.defaultChild as CfnElement);
    const t = samTemplate();
    const summary = (tpl: CfnTemplate, topicId: string) => {
      const key = JSON.stringify(tpl.Resources[topicId].Properties.KmsMasterKeyId);
      const policy = Object.values(tpl.Resources).find(
        (r) => r.Type === 'AWS::SNS::TopicPolicy' && r.Properties.Topics.some((x: any) => x.Ref === topicId),
      );
      const tlsOnly = (policy?.Properties.PolicyDocument.Statement ?? []).some(
        (s: any) => s.Effect === 'Deny' && String(s.Condition?.Bool?.['aws:SecureTransport']) === 'false',
      );
      return { awsManagedKey: key.includes('alias/aws/sns'), tlsOnly, output: tpl.Outputs?.OperationalTopicArn?.Value };
    };
    expect(summary(json, cdkId)).toEqual({ awsManagedKey: true, tlsOnly: true, output: { Ref: cdkId } });
    expect(summary(t, 'OperationalTopic')).toEqual({ awsManagedKey: true, tlsOnly: true, output: { Ref: 'OperationalTopic' } });
  });

  test('Contributor Insights rules: the same bodies over the sender log group, enabled, in both', () => {
    const { stack, json } = defaultStack();
    const cdkLogs = stack.getLogicalId(stack.functions.logGroups.sender.node.defaultChild as CfnElement);
    const flatten = (raw: any, logsId: string): string => {
      if (typeof raw === 'string') return raw;
      if (raw['Fn::Join']) return raw['Fn::Join'][1].map((x: any) => (typeof x === 'string' ? x : x.Ref === logsId ? 'SENDER_LOGS' : 'OTHER')).join('');
      return String(raw['Fn::Sub']).replace(/\$\{([^}]+)\}/g, (_m, name: string) => (name === logsId ? 'SENDER_LOGS' : 'OTHER'));
    };
    const rules = (tpl: CfnTemplate, logsId: string) =>
      Object.values(tpl.Resources)
        .filter((r) => r.Type === 'AWS::CloudWatch::InsightRule')
        .map((r) => ({ state: r.Properties.RuleState, body: JSON.parse(flatten(r.Properties.RuleBody, logsId)) }))
        .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
    const cdk = rules(json, cdkLogs);
    expect(cdk).toHaveLength(2);
    expect(rules(samTemplate(), 'SenderLogGroup')).toEqual(cdk);
  });

  test('log retention, dashboard, exported outputs', () => {
    expect(sam.logRetentionDays).toEqual(cdk.logRetentionDays);
    expect(cdk.hasDashboard && sam.hasDashboard).toBe(true);
    expect(sam.exportedOutputs).toEqual(cdk.exportedOutputs);
  });
});

describe('template.yaml builds with cargo-lambda from the workspace', () => {
  const t = samTemplate();
  test.each([
    ['RelayFunction', 'relay'],
    ['SenderFunction', 'sender'],
    ['ReplayFunction', 'replay'],
    ['ConsoleFunction', 'console'],
    ['ApiFunction', 'api'],
  ])('%s builds binary %s', (logicalId, bin) => {
    const r = t.Resources[logicalId];
    expect(r.Metadata).toEqual({ BuildMethod: 'rust-cargolambda', BuildProperties: { Binary: bin } });
    expect(r.Properties.CodeUri).toBe('..');
  });

  test('state machine uses the shared definition file and a send-only role', () => {
    const sm = t.Resources.DelayedDeliveryStateMachine.Properties;
    expect(sm.DefinitionUri).toBe('statemachine/delayed-delivery.asl.json');
    const role = t.Resources.DelayedDeliveryRole.Properties;
    const statements = role.Policies.flatMap((p: any) => p.PolicyDocument.Statement);
    expect(statements).toEqual([{ Effect: 'Allow', Action: 'sqs:SendMessage', Resource: { 'Fn::GetAtt': ['DeliveryQueue', 'Arn'] } }]);
    expect(role.ManagedPolicyArns).toBeUndefined();
  });
});
