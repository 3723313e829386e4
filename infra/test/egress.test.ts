/**
 * Fixed source IPs (`egress: static`, issue 20): the default stack has no VPC at all; the static
 * one puts the sender and the api in private subnets behind one NAT gateway with an Elastic IP per
 * zone, DynamoDB through a gateway endpoint, outputs the addresses, and passes cdk-nag; template.yaml
 * deploys the same network resource by resource for 1, 2 and 3 zones, and nothing in shared mode.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { CfnElement, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { StaticEgress } from '../lib/constructs/egress';
import { createApp } from '../lib/app';
import { nagAcknowledgments } from '../lib/nag-suppressions';
import { TernStack } from '../lib/tern-stack';
import { CfnTemplate, defaultStack, samTemplate, settings, synth, Synthesized } from './helpers';
import { conditionHolds, flattenText, Names, normalizeValue } from './normalize';

const staticStacks: Record<number, Synthesized> = {};
/** A static-egress stack with `zones` availability zones, synthesized once per zone count. */
function staticStack(zones?: number): Synthesized {
  const key = zones ?? 0;
  staticStacks[key] ??= synth(
    { alarmEmail: 'ops@example.com' },
    zones === undefined ? { 'tern:egress': 'static' } : { 'tern:egress': 'static', 'tern:egressAvailabilityZones': String(zones) },
  );
  return staticStacks[key];
}

const lid = (stack: TernStack, c: { node: { defaultChild?: unknown } } | CfnElement) =>
  stack.getLogicalId(((c as any).node.defaultChild ?? c) as CfnElement);
/** A policy statement with its actions and resources in a fixed order (CDK's minimizePolicies sorts them). */
const sorted = (s: any) => ({
  ...s,
  Action: [s.Action].flat().sort(),
  Resource: [s.Resource].flat().sort((a: unknown, b: unknown) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
});
const ofType = (t: CfnTemplate, type: string) => Object.entries(t.Resources).filter(([, r]) => r.Type === type);

describe('egress: shared (the default)', () => {
  test('settings.json says shared, two zones when static, a /16', () => {
    expect(settings.egress).toMatchObject({ mode: 'shared', availabilityZones: 2, vpcCidr: '10.0.0.0/16' });
  });

  test('CDK: no VPC, no EC2 resource of any kind, no function in a VPC, no egress output', () => {
    const { stack, json } = defaultStack();
    expect(stack.egress).toBeUndefined();
    expect(Object.values(json.Resources).filter((r) => r.Type.startsWith('AWS::EC2::'))).toEqual([]);
    for (const [, fn] of ofType(json, 'AWS::Lambda::Function')) expect(fn.Properties.VpcConfig).toBeUndefined();
    expect(Object.keys(json.Outputs ?? {}).filter((k) => k.startsWith('Egress'))).toEqual([]);
  });

  test('SAM at its defaults: every EC2 resource and egress output is behind a false condition, no function gets a VpcConfig', () => {
    const t = samTemplate();
    expect(t.Parameters!.Egress.Default).toBe(settings.egress.mode);
    expect(t.Parameters!.EgressAvailabilityZones.Default).toBe(settings.egress.availabilityZones);
    const ec2 = Object.entries(t.Resources).filter(([, r]) => r.Type.startsWith('AWS::EC2::'));
    expect(ec2.length).toBeGreaterThan(0);
    for (const [id, r] of ec2) {
      expect([id, r.Condition && conditionHolds(r.Condition, {}, t)]).toEqual([id, false]);
    }
    for (const [id, o] of Object.entries(t.Outputs!).filter(([k]) => k.startsWith('Egress'))) {
      expect([id, conditionHolds(o.Condition, {}, t)]).toEqual([id, false]);
    }
    for (const [id, fn] of ofType(t, 'AWS::Serverless::Function')) {
      // relay-pg (PostgresOutbox, off by default) runs in the database's VPC, not the egress's.
      if (fn.Condition && !conditionHolds(fn.Condition, {}, t)) continue;
      expect([id, normalizeValue(fn.Properties.VpcConfig, {}, t)]).toEqual([id, undefined]);
    }
  });
});

describe('egress: static', () => {
  test.each([1, 2, 3])('%i zone(s): that many NAT gateways, Elastic IPs and private subnets, one VPC', (zones) => {
    const { stack, json } = staticStack(zones);
    expect(ofType(json, 'AWS::EC2::VPC')).toHaveLength(1);
    expect(ofType(json, 'AWS::EC2::NatGateway')).toHaveLength(zones);
    expect(ofType(json, 'AWS::EC2::EIP')).toHaveLength(zones);
    expect(ofType(json, 'AWS::EC2::Subnet')).toHaveLength(2 * zones);
    expect(stack.egress!.privateSubnets).toHaveLength(zones);
    // Each zone's EIP is its NAT gateway's address, and each zone's NAT sits in its own public subnet.
    stack.egress!.natGateways.forEach((nat, i) => {
      const p = json.Resources[lid(stack, nat)].Properties;
      expect(p.AllocationId).toEqual({ 'Fn::GetAtt': [lid(stack, stack.egress!.addresses[i]), 'AllocationId'] });
      const subnet = json.Resources[p.SubnetId.Ref].Properties;
      expect(subnet.AvailabilityZone).toEqual({ 'Fn::Select': [i, { 'Fn::GetAZs': '' }] });
      expect(subnet.CidrBlock['Fn::Select'][0]).toBe(i);
    });
  });

  test('the default zone count comes from settings.json', () => {
    expect(staticStack().stack.egress!.natGateways).toHaveLength(settings.egress.availabilityZones);
  });

  test('private subnets: /20 blocks 3.., no public addresses, default route to their own zone\'s NAT gateway', () => {
    const { stack, json } = staticStack(3);
    const egress = stack.egress!;
    egress.privateSubnets.forEach((subnet, i) => {
      const p = json.Resources[lid(stack, subnet)].Properties;
      expect(p.MapPublicIpOnLaunch).toBe(false);
      expect(p.AvailabilityZone).toEqual({ 'Fn::Select': [i, { 'Fn::GetAZs': '' }] });
      expect(p.CidrBlock).toEqual({
        'Fn::Select': [3 + i, { 'Fn::Cidr': [{ 'Fn::GetAtt': [lid(stack, egress.vpc), 'CidrBlock'] }, 6, '12'] }],
      });
      const association = ofType(json, 'AWS::EC2::SubnetRouteTableAssociation').find(([, r]) => r.Properties.SubnetId.Ref === lid(stack, subnet))!;
      const routes = ofType(json, 'AWS::EC2::Route').filter(([, r]) => r.Properties.RouteTableId.Ref === association[1].Properties.RouteTableId.Ref);
      expect(routes.map(([, r]) => r.Properties)).toEqual([
        { RouteTableId: association[1].Properties.RouteTableId, DestinationCidrBlock: '0.0.0.0/0', NatGatewayId: { Ref: lid(stack, egress.natGateways[i]) } },
      ]);
    });
    expect(json.Resources[lid(stack, egress.vpc)].Properties.CidrBlock).toBe(settings.egress.vpcCidr);
  });

  test('the sender and the api run in the private subnets with the egress security group; relay, replay and console stay outside', () => {
    const { stack, json } = staticStack();
    const egress = stack.egress!;
    const expected = {
      SubnetIds: egress.privateSubnets.map((s) => ({ Ref: lid(stack, s) })),
      SecurityGroupIds: [{ 'Fn::GetAtt': [lid(stack, egress.securityGroup), 'GroupId'] }],
    };
    for (const fn of [stack.functions.sender, stack.functions.api]) {
      const r = json.Resources[lid(stack, fn)];
      expect(r.Properties.VpcConfig).toEqual(expected);
      // Created after the NAT routes: its first invocation can reach receivers.
      for (const route of egress.privateDefaultRoutes) expect((r as any).DependsOn).toContain(lid(stack, route));
    }
    for (const fn of [stack.functions.relay, stack.functions.replay, stack.functions.console]) {
      expect(json.Resources[lid(stack, fn)].Properties.VpcConfig).toBeUndefined();
    }
  });

  test('security group: nothing inbound; outbound TCP on every port (URLs may name any), IPv4 only', () => {
    const { stack, json } = staticStack();
    const p = json.Resources[lid(stack, stack.egress!.securityGroup)].Properties;
    expect(p.SecurityGroupIngress).toBeUndefined();
    expect(ofType(json, 'AWS::EC2::SecurityGroupIngress')).toEqual([]);
    expect(p.SecurityGroupEgress.map(({ Description, ...rule }: any) => rule)).toEqual([
      { IpProtocol: 'tcp', FromPort: 1, ToPort: 65535, CidrIp: '0.0.0.0/0' },
    ]);
  });

  test('DynamoDB through a gateway endpoint on every private route table (and nothing else through an endpoint)', () => {
    const { json } = staticStack(3);
    const endpoints = ofType(json, 'AWS::EC2::VPCEndpoint');
    expect(endpoints).toHaveLength(1);
    const p = endpoints[0][1].Properties;
    expect(p.VpcEndpointType).toBe('Gateway');
    expect(p.ServiceName).toEqual({ 'Fn::Sub': 'com.amazonaws.${AWS::Region}.dynamodb' });
    const privateTables = ofType(json, 'AWS::EC2::Route')
      .filter(([, r]) => r.Properties.NatGatewayId)
      .map(([, r]) => r.Properties.RouteTableId);
    expect(p.RouteTableIds).toEqual(privateTables);
  });

  test('flow log: every flow of the VPC to its own log group, through a role only flow logs of this account may assume', () => {
    const { stack, json } = staticStack();
    const egress = stack.egress!;
    expect(json.Resources[lid(stack, egress.flowLog)].Properties).toEqual({
      ResourceId: { Ref: lid(stack, egress.vpc) },
      ResourceType: 'VPC',
      TrafficType: 'ALL',
      LogDestinationType: 'cloud-watch-logs',
      LogGroupName: { Ref: lid(stack, egress.flowLogGroup) },
      DeliverLogsPermissionArn: { 'Fn::GetAtt': [lid(stack, egress.flowLogRole), 'Arn'] },
      MaxAggregationInterval: 600,
    });
    const role = json.Resources[lid(stack, egress.flowLogRole)].Properties;
    expect(role.AssumeRolePolicyDocument.Statement).toEqual([
      {
        Action: 'sts:AssumeRole',
        Effect: 'Allow',
        Principal: { Service: 'vpc-flow-logs.amazonaws.com' },
        Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
      },
    ]);
    expect(json.Resources[lid(stack, egress.flowLogGroup)].Properties.RetentionInDays).toBe(settings.logs.retentionDays);
  });

  test('sender and api roles: the network-interface actions, scoped; no AWS managed policy on any role', () => {
    const { stack, json } = staticStack(2);
    const egress = stack.egress!;
    for (const role of [stack.functions.roles.sender, stack.functions.roles.api]) {
      const roleId = lid(stack, role);
      const statements = Object.values(json.Resources)
        .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
        .flatMap((r) => r.Properties.PolicyDocument.Statement)
        .filter((s: any) => [s.Action].flat().some((a: string) => a.startsWith('ec2:')))
        .map(sorted);
      const eni = { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':network-interface/*']] };
      const arnOf = (kind: string, id: unknown) => ({
        'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, `:${kind}/`, id]],
      });
      expect(statements).toEqual(
        [
        { Action: ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets'], Effect: 'Allow', Resource: '*' },
        {
          Action: 'ec2:CreateNetworkInterface',
          Effect: 'Allow',
          Resource: [
            eni,
            ...egress.privateSubnets.map((s) => arnOf('subnet', { Ref: lid(stack, s) })),
            arnOf('security-group', { 'Fn::GetAtt': [lid(stack, egress.securityGroup), 'GroupId'] }),
          ],
        },
        {
          Action: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'],
          Effect: 'Allow',
          Resource: eni,
        },
        ].map(sorted),
      );
    }
    for (const [id, r] of ofType(json, 'AWS::IAM::Role')) expect([id, r.Properties.ManagedPolicyArns]).toEqual([id, undefined]);
    // No other function's role may touch network interfaces.
    for (const fn of ['relay', 'replay', 'console'] as const) {
      const roleId = lid(stack, stack.functions.roles[fn]);
      const text = JSON.stringify(Object.values(json.Resources).filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId)));
      expect(text).not.toContain('ec2:');
    }
  });

  test.each([1, 2, 3])('%i zone(s): outputs EgressIp1..N (each an Elastic IP) and EgressIps, the comma-separated list', (zones) => {
    const { stack, json } = staticStack(zones);
    const ips = stack.egress!.addresses.map((eip) => ({ 'Fn::GetAtt': [lid(stack, eip), 'PublicIp'] }));
    const outputs = Object.fromEntries(Object.entries(json.Outputs!).filter(([k]) => k.startsWith('Egress')).map(([k, o]) => [k, o.Value]));
    expect(outputs).toEqual({
      ...Object.fromEntries(ips.map((ip, i) => [`EgressIp${i + 1}`, ip])),
      // One address is the list itself (CDK writes no Fn::Join of one element).
      EgressIps: zones === 1 ? ips[0] : { 'Fn::Join': [',', ips] },
    });
  });

  test('cdk-nag: no unacknowledged finding; the four extra acknowledgments are the network-interface grants', () => {
    const { stack } = staticStack();
    const report = new AwsSolutionsChecks(stack, { verbose: true }).validateScope(stack);
    expect(report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`))).toEqual([]);
    const extra = nagAcknowledgments(stack).filter((a) => !nagAcknowledgments(defaultStack().stack).some((d) => d.id === a.id && d.scope.node.path === a.scope.node.path));
    expect(extra.map((a) => `${a.id} on ${a.scope.node.path}`).sort()).toEqual([
      'AwsSolutions-IAM5[Resource::*] on Tern/Functions/ApiRole',
      'AwsSolutions-IAM5[Resource::*] on Tern/Functions/SenderRole',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*] on Tern/Functions/ApiRole',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*] on Tern/Functions/SenderRole',
    ]);
    for (const a of extra) expect(a.reason.length).toBeGreaterThan(60);
  });

  test('cdk-nag: every static-egress acknowledgment is needed (without them the same four findings come back)', () => {
    const app = createApp({ skipBundling: true, nag: false, outdir: fs.mkdtempSync(path.join(os.tmpdir(), 'tern-egress-nag-')) });
    const bare = new TernStack(app, 'Tern', { egress: 'static' });
    for (const a of nagAcknowledgments(bare)) {
      const node = a.scope.node as unknown as { _metadata: Array<{ type: string }> };
      node._metadata = node._metadata.filter((m) => m.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY);
    }
    const report = new AwsSolutionsChecks(bare, { verbose: true }).validateScope(bare);
    const found = report.violations
      .flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`))
      .filter((f) => /Functions\/(Sender|Api)Role/.test(f))
      .map((f) => f.replace(/ at Tern\/Functions\/(Sender|Api)Role\/DefaultPolicy.*$/, ' at $1'))
      .sort();
    expect(found).toEqual([
      'AwsSolutions-IAM5[Resource::*] at Api',
      'AwsSolutions-IAM5[Resource::*] at Sender',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*] at Api',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*] at Sender',
      // Every stack's (not static egress's): the sender and the api (test sends) read mutual TLS client certificates under tern/mtls/.
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*] at Api',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*] at Sender',
    ]);
  });
});

describe('egress settings', () => {
  test('context tern:egress and tern:egressAvailabilityZones are read; props win', () => {
    expect(synth({}, { 'tern:egress': 'static', 'tern:egressAvailabilityZones': '1' }).stack.egress!.natGateways).toHaveLength(1);
    expect(synth({ egress: 'shared' }, { 'tern:egress': 'static' }).stack.egress).toBeUndefined();
  });

  test.each([
    [{ 'tern:egress': 'private' }, /egress must be "shared" or "static"/],
    [{ 'tern:egress': 'static', 'tern:egressAvailabilityZones': '4' }, /egressAvailabilityZones must be an integer in 1\.\.3/],
    [{ 'tern:egress': 'static', 'tern:egressAvailabilityZones': '0' }, /egressAvailabilityZones must be an integer in 1\.\.3/],
  ])('refused: %j', (context, message) => {
    expect(() => synth({}, context)).toThrow(message);
  });

  test('SAM parameters: the same modes and zone range as the CDK app', () => {
    const t = samTemplate();
    expect(t.Parameters!.Egress).toMatchObject({ Type: 'String', AllowedValues: ['shared', 'static'] });
    expect(t.Parameters!.EgressAvailabilityZones).toMatchObject({ Type: 'Number', AllowedValues: [1, 2, 3] });
  });
});

/**
 * The egress network of one template, deployed resources only, every reference renamed to its
 * template.yaml logical id: resource properties (tags with the stack name as `Tern`), the flow
 * log role's trust and statements, the sender's and api's VpcConfig, and the egress outputs.
 */
function network(t: CfnTemplate, names: Names): Record<string, unknown> {
  const deployed = (c?: string) => !c || conditionHolds(c, names, t);
  const n = (v: unknown) => JSON.parse(JSON.stringify(normalizeValue(v, names, t) ?? null).split('${AWS::StackName}').join('Tern'));
  const tags = (v: any[] | undefined) => v?.map((tag) => ({ Key: tag.Key, Value: flattenText(tag.Value, names).replace('${AWS::StackName}', 'Tern') }));
  const resources: Record<string, unknown> = {};
  for (const [id, r] of Object.entries(t.Resources)) {
    const name = names[id];
    // IAM policies are compared as statements below (template.yaml writes them inline in the role).
    if (!name?.startsWith('Egress') || !deployed(r.Condition) || r.Type === 'AWS::IAM::Policy') continue;
    const { Tags, Policies, ...props } = r.Properties ?? {};
    const properties = n(props);
    // A DependsOn on a resource the properties already reference changes nothing (cfn-lint W3005).
    const referenced = JSON.stringify(properties);
    const dependsOn = [...new Set([(r as any).DependsOn ?? []].flat().map((d: string) => names[d] ?? d))]
      .filter((d) => !referenced.includes(`"ref:${d}"`) && !referenced.includes(`"${d}.`))
      .sort();
    resources[name] = { Type: r.Type, Properties: properties, Tags: tags(Tags), DependsOn: dependsOn };
  }
  // The flow log role's permissions: CDK writes a separate policy, template.yaml inline Policies.
  const roleId = Object.keys(names).find((k) => names[k] === 'EgressFlowLogRole' && t.Resources[k].Type === 'AWS::IAM::Role');
  const statements = !roleId || !deployed(t.Resources[roleId].Condition) ? [] : [
    ...Object.values(t.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
      .flatMap((r) => r.Properties.PolicyDocument.Statement),
    ...(t.Resources[roleId!]?.Properties.Policies ?? []).flatMap((p: any) => p.PolicyDocument.Statement),
  ].map((s) => ({
    ...n(s),
    Action: [s.Action].flat().sort(),
    Resource: [s.Resource].flat().map((r: unknown) => flattenText(r, names)).sort(),
  }));
  const fn = (logical: string) => n(t.Resources[Object.keys(names).find((k) => names[k] === logical)!].Properties.VpcConfig);
  const outputs = Object.fromEntries(
    Object.entries(t.Outputs ?? {})
      .filter(([k, o]) => k.startsWith('Egress') && deployed(o.Condition))
      .map(([k, o]) => [k, { Description: o.Description, Value: n(o.Value) }]),
  );
  return { resources, flowLogStatements: statements, sender: fn('SenderFunction'), api: fn('ApiFunction'), outputs };
}

/** CDK logical id -> template.yaml logical id, for the egress resources and the functions. */
function cdkNames(stack: TernStack): Names {
  const names: Names = {
    [lid(stack, stack.functions.sender)]: 'SenderFunction',
    [lid(stack, stack.functions.api)]: 'ApiFunction',
  };
  if (!stack.egress) return names;
  for (const child of stack.egress.node.children) {
    const cfn = (child as any).node.defaultChild ?? child;
    if (cfn instanceof CfnElement) names[stack.getLogicalId(cfn)] = `Egress${child.node.id}`;
  }
  // template.yaml writes the flow log role's policy inline: CDK's separate policy is part of the role.
  const policy = stack.egress.flowLogRole.node.tryFindChild('DefaultPolicy')?.node.defaultChild as CfnElement;
  names[stack.getLogicalId(policy)] = 'EgressFlowLogRole';
  return names;
}

describe('CDK and SAM deploy the same egress', () => {
  const sam = (mode: string, zones: number) => {
    const t = samTemplate();
    t.Parameters!.Egress.Default = mode;
    t.Parameters!.EgressAvailabilityZones.Default = zones;
    const names: Names = { SenderFunction: 'SenderFunction', ApiFunction: 'ApiFunction' };
    for (const id of Object.keys(t.Resources)) if (id.startsWith('Egress')) names[id] = id;
    return network(t, names);
  };

  test('shared: neither deploys a network resource, a VpcConfig or an egress output', () => {
    const { stack, json } = defaultStack();
    const cdk = network(json, cdkNames(stack));
    expect(cdk).toEqual({ resources: {}, flowLogStatements: [], sender: null, api: null, outputs: {} });
    // The handle the functions wait on is no network resource: it costs and does nothing.
    const s = sam('shared', settings.egress.availabilityZones);
    expect(Object.entries(s.resources as object).map(([k, r]) => `${k} ${r.Type}`)).toEqual(['EgressReady AWS::CloudFormation::WaitConditionHandle']);
    expect({ ...s, resources: {} }).toEqual(cdk);
  });

  test.each([1, 2, 3])('static with %i zone(s): the same resources, properties, dependencies, roles, VpcConfig and outputs', (zones) => {
    const { stack, json } = staticStack(zones);
    const cdk = network(json, cdkNames(stack)) as any;
    const s = sam('static', zones) as any;
    // template.yaml's functions wait on EgressReady, which names the NAT routes (CDK: DependsOn them directly).
    expect(s.resources.EgressReady.Type).toBe('AWS::CloudFormation::WaitConditionHandle');
    delete s.resources.EgressReady;
    const routes = Object.keys(cdk.resources).filter((k) => /^EgressPrivateDefaultRoute\d$/.test(k));
    expect(routes).toHaveLength(zones);
    expect(Object.keys(s.resources).sort()).toEqual(Object.keys(cdk.resources).sort());
    expect(s).toEqual(cdk);
  });

  test('template.yaml: the sender and the api wait on EgressReady, which names every deployed NAT route', () => {
    for (const zones of [1, 2, 3]) {
      const t = samTemplate();
      t.Parameters!.Egress.Default = 'static';
      t.Parameters!.EgressAvailabilityZones.Default = zones;
      for (const fn of ['SenderFunction', 'ApiFunction']) expect((t.Resources[fn] as any).DependsOn).toBe('EgressReady');
      const routes = normalizeValue(t.Resources.EgressReady.Metadata.NatRoutes, {}, t);
      expect(routes).toEqual(Array.from({ length: zones }, (_, i) => `ref:EgressPrivateDefaultRoute${i + 1}`));
    }
  });

  test('the construct is the one both describe (a guard against a renamed child)', () => {
    expect(staticStack().stack.egress).toBeInstanceOf(StaticEgress);
  });
});
