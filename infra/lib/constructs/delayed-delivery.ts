import * as iam from 'aws-cdk-lib/aws-iam';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { STATE_MACHINE_DEFINITION_FILE } from '../settings';

export interface DelayedDeliveryProps {
  /** The only queue the state machine may send to. */
  readonly deliveryQueue: sqs.IQueue;
}

/**
 * Retries longer than SQS's 900 s DelaySeconds: a STANDARD state machine (Express
 * stops at 5 minutes) that waits `wait_seconds` and puts the message back on the
 * delivery queue. The definition is infra/statemachine/delayed-delivery.asl.json,
 * shared with template.yaml.
 */
export class DelayedDelivery extends Construct {
  public readonly stateMachine: sfn.StateMachine;

  constructor(scope: Construct, id: string, props: DelayedDeliveryProps) {
    super(scope, id);
    // An explicit role, so that nothing but sqs:SendMessage on the delivery queue is on it.
    const role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('states.amazonaws.com'),
      description: 'Tern delayed delivery: may only send to the delivery queue',
    });
    props.deliveryQueue.grant(role, 'sqs:SendMessage');
    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      definitionBody: sfn.DefinitionBody.fromFile(STATE_MACHINE_DEFINITION_FILE),
      stateMachineType: sfn.StateMachineType.STANDARD,
      role,
    });
  }
}
