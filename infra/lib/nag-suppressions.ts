import { Validations } from 'aws-cdk-lib';
import { IConstruct } from 'constructs';
import type { TernStack } from './tern-stack';

/** One accepted cdk-nag finding: where, which rule (and finding), and why. */
export interface NagAcknowledgment {
  readonly scope: IConstruct;
  /** Rule id, with the finding in brackets for rules that report several (e.g. `AwsSolutions-IAM5[Resource::*]`). */
  readonly id: string;
  readonly reason: string;
}

/**
 * Every cdk-nag (AwsSolutions) finding we accept, each with its reason. Each is
 * scoped to one construct and, for wildcard findings, to the exact finding. The
 * tests fail on any finding not acknowledged here and on a reason that is too short.
 */
export function nagAcknowledgments(stack: TernStack): NagAcknowledgment[] {
  return mergeSameFinding([
    ...staticEgressAcknowledgments(stack),
    ...tracingAcknowledgments(stack),
    ...postgresOutboxAcknowledgments(stack),
    {
      scope: stack.queues.relayFailures,
      id: 'AwsSolutions-SQS3',
      reason:
        'The relay-failure queue is itself a failure destination (the OnFailure target of the relay stream mapping); ' +
        'a dead-letter queue behind it would only hide records an operator must look at, and its depth is alarmed.',
    },
    {
      scope: stack.functions.roles.relay,
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason:
        'dynamodb:ListStreams, added by the DynamoDB event source (table.grantStreamRead), does not support ' +
        'resource-level permissions; the stream reads themselves are scoped to the outbox stream ARN.',
    },
    ...[stack.functions.roles.sender, stack.functions.roles.api].map((scope) => ({
      scope,
      id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*]',
      reason:
        'Mutual TLS: the sender (and the api function, for a test send) reads the client certificate secret each endpoint names, ' +
        'and endpoints can name only secrets under their own tenant\'s tern/mtls/<tenant id>/ prefix (validated when set and before ' +
        'every read: one sender serves every tenant, so the tenant part is the code\'s check); the wildcard is the prefix plus ' +
        'the six characters Secrets Manager appends to every secret ARN, and the action is GetSecretValue alone.',
    })),
    {
      scope: stack.portal.keys,
      id: 'AwsSolutions-SMG4',
      reason:
        'The portal key ring is rotated by Tern itself (tern_aws::portal::SecretsManagerKeys::rotate puts a new key in front and keeps ' +
        'the previous one verifying, so live portal sessions survive); a Secrets Manager rotation Lambda would replace the ring and end them.',
    },
    ...stack.api.portalRoutes.map((route) => ({
      scope: route,
      id: 'AwsSolutions-APIG4',
      reason:
        "The customer portal's pages are opened by a customer's browser, which cannot sign SigV4: the api function authenticates " +
        '/portal/* itself (an HMAC-signed single-use link, then a signed HttpOnly session cookie) and refuses /v1 without an IAM caller.',
    })),
    {
      scope: stack.delayedDelivery.stateMachine,
      id: 'AwsSolutions-SF1',
      reason:
        'By contract the state machine role may only sqs:SendMessage to the delivery queue, so it has no CloudWatch Logs ' +
        'delivery permissions; execution history stays in Step Functions for 90 days and failed executions are alarmed (DelayedDeliveryFailed).',
    },
    {
      scope: stack.delayedDelivery.stateMachine,
      id: 'AwsSolutions-SF2',
      reason:
        'X-Ray tracing would add xray permissions to a role restricted to sqs:SendMessage; a Wait followed by one ' +
        'SendMessage has nothing worth tracing, and failed executions are alarmed.',
    },
  ]);
}

/** One acknowledgment per construct and finding: the reasons of the same finding joined. */
function mergeSameFinding(acks: NagAcknowledgment[]): NagAcknowledgment[] {
  const merged: NagAcknowledgment[] = [];
  for (const a of acks) {
    const i = merged.findIndex((m) => m.scope === a.scope && m.id === a.id);
    if (i < 0) merged.push(a);
    else merged[i] = { ...merged[i], reason: `${merged[i].reason} ${a.reason}` };
  }
  return merged;
}

/**
 * Tracing on (`otlpEndpoint` set) only: xray:PutTraceSegments, which authorizes a span export
 * to X-Ray's OTLP traces endpoint, on the four functions that trace.
 */
function tracingAcknowledgments(stack: TernStack): NagAcknowledgment[] {
  if (stack.config.otlpEndpoint === '') return [];
  const { relay, sender, replay, api } = stack.functions.roles;
  return [relay, sender, replay, api].map((scope) => ({
    scope,
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason:
      "xray:PutTraceSegments (tracing on: X-Ray's OTLP traces endpoint authorizes each span export as this action, " +
      "signed by the ADOT collector with the function's role) has no resource-level permissions; it only writes spans.",
  }));
}

/**
 * `egress: static` only: the network-interface actions Lambda needs for a function in a VPC
 * (the actions of AWSLambdaVPCAccessExecutionRole, granted inline instead of the managed policy).
 */
function staticEgressAcknowledgments(stack: TernStack): NagAcknowledgment[] {
  if (!stack.egress) return [];
  return [stack.functions.roles.sender, stack.functions.roles.api].flatMap((role) => [
    {
      scope: role,
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason:
        'ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets, which Lambda calls to manage the function\'s network ' +
        'interfaces in the static-egress VPC, have no resource-level permissions (Lambda developer guide, VPC access: ' +
        'DescribeNetworkInterfaces works only on "*"); they read, and change nothing.',
    },
    {
      scope: role,
      id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*]',
      reason:
        'Lambda creates, re-addresses and deletes the function\'s Hyperplane network interfaces, whose ids are not known ' +
        'before they exist; the grant is limited to network interfaces of this account and Region (creation further to the ' +
        'egress subnets and security group).',
    },
  ]);
}

/**
 * `postgresOutbox` only: the relay-pg function runs in the database's VPC, so its role holds the
 * same network-interface actions as the static egress's functions, and for the same reasons.
 */
function postgresOutboxAcknowledgments(stack: TernStack): NagAcknowledgment[] {
  const role = stack.functions.roles['relay-pg'];
  if (!stack.functions.relayPg || !role) return [];
  return [
    {
      scope: role,
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason:
        'ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets, which Lambda calls to manage the PostgreSQL relay\'s network ' +
        'interfaces in the database\'s VPC, have no resource-level permissions (Lambda developer guide, VPC access); they read, and change nothing.',
    },
    {
      scope: role,
      id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*]',
      reason:
        'Lambda creates, re-addresses and deletes the PostgreSQL relay\'s network interfaces, whose ids are not known before ' +
        'they exist; limited to network interfaces of this account and Region (creation further to the given subnets and security groups).',
    },
  ];
}

export function applyNagSuppressions(stack: TernStack): void {
  for (const a of nagAcknowledgments(stack)) {
    Validations.of(a.scope).acknowledge({ id: a.id, reason: a.reason });
  }
}
