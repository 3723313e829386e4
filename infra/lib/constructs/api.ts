import { RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as apigwv2 from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpIamAuthorizer } from 'aws-cdk-lib/aws-apigatewayv2-authorizers';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { TernConfig } from '../config';

export interface TernApiProps {
  readonly config: TernConfig;
  /** The `api` function (functions/api): the tern-api router through lambda_http. */
  readonly handler: lambda.IFunction;
  /** Retention of the access log group, days (a CloudWatch Logs retention value). */
  readonly logRetention: logs.RetentionDays;
}

/** The API's route: every method and path goes to the function, whose router answers unknown paths with a problem 404. */
export const API_ROUTE_KEY = 'ANY /{proxy+}';

/**
 * The customer portal's pages (tern_api::portal): the one route without IAM authorization.
 * A customer's browser cannot sign SigV4; the function authenticates these paths itself
 * (a signed single-use link, then a signed session cookie), and its router keeps every
 * `/v1` path behind the IAM caller API Gateway passes, which these requests never carry.
 */
export const PORTAL_ROUTE_KEY = 'ANY /portal/{proxy+}';

/** The stage: `$default`, served at the API's base URL (no stage name in the path). */
export const API_STAGE_NAME = '$default';

/**
 * One JSON line per request in the access log group (HTTP API `$context` variables).
 * `caller` is the IAM principal API Gateway authorized (the same one the function reads);
 * `error` says why API Gateway answered itself (a bad signature, a denied policy, a throttle);
 * `integrationError` why the function could not be reached. No body, header or query is logged.
 * template.yaml's TernApiStage carries the same string (the infra tests compare them).
 */
export const API_ACCESS_LOG_FORMAT = JSON.stringify({
  requestId: '$context.requestId',
  requestTime: '$context.requestTimeEpoch',
  ip: '$context.identity.sourceIp',
  caller: '$context.identity.userArn',
  method: '$context.httpMethod',
  path: '$context.path',
  status: '$context.status',
  responseLength: '$context.responseLength',
  responseLatency: '$context.responseLatency',
  integrationStatus: '$context.integrationStatus',
  integrationLatency: '$context.integrationLatency',
  integrationError: '$context.integrationErrorMessage',
  error: '$context.error.message',
});

/**
 * The Tern API in AWS: an API Gateway HTTP API in front of the `api` function.
 *
 * HTTP API rather than REST API: the function reads the caller from the HTTP API's request
 * context (payload format 2.0: lambda_http's `apigw_http` feature, tern_api::auth::iam_caller),
 * it costs $1.00 per million requests against REST's $3.50 (us-east-1), and the router validates
 * every request itself (problem+json naming the field), so REST's request validators, usage
 * plans and API keys would add nothing: callers are IAM principals, throttled per stage.
 *
 * Every route but the portal's (PORTAL_ROUTE_KEY) uses AWS_IAM: API Gateway checks the SigV4 signature and the caller's
 * `execute-api:Invoke` permission on the request's path before the function runs, so an IAM
 * policy can confine a role to `.../v1/tenants/<id>/*` (README.md). The stage is throttled
 * (settings.json `api`) and writes an access log line per request to its own log group.
 */
export class TernApi extends Construct {
  public readonly httpApi: apigwv2.HttpApi;
  public readonly stage: apigwv2.HttpStage;
  /** The access log group: one JSON line per request (API_ACCESS_LOG_FORMAT). */
  public readonly accessLogs: logs.LogGroup;
  /** The base URL (`https://<api id>.execute-api.<region>.amazonaws.com`, no trailing slash): the ApiUrl output. */
  public readonly url: string;
  /** The customer portal's route (PORTAL_ROUTE_KEY), without IAM. */
  public readonly portalRoutes: apigwv2.HttpRoute[];

  constructor(scope: Construct, id: string, props: TernApiProps) {
    super(scope, id);
    this.accessLogs = new logs.LogGroup(this, 'AccessLogs', {
      retention: props.logRetention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.httpApi = new apigwv2.HttpApi(this, 'Http', {
      apiName: `${Stack.of(this).stackName}-api`,
      description: 'Tern API: endpoints, events, the delivery log and dead letters (SigV4, IAM authorization)',
      // The stage below, with its throttling and access log, replaces the unconfigured default one.
      createDefaultStage: false,
      // Every route, present and future, is behind IAM unless it says otherwise (only the portal's does).
      defaultAuthorizer: new HttpIamAuthorizer(),
    });
    // Lambda proxy (payload format 2.0). The integration's invoke permission is scoped to this
    // API's {proxy+} route; API Gateway waits its default and longest 30 s for the function.
    const integration = new HttpLambdaIntegration('Function', props.handler, {
      payloadFormatVersion: apigwv2.PayloadFormatVersion.VERSION_2_0,
    });
    this.httpApi.addRoutes({
      path: '/{proxy+}',
      methods: [apigwv2.HttpMethod.ANY],
      integration,
    });
    // API Gateway picks the most specific route: /portal/... comes here, without IAM.
    this.portalRoutes = this.httpApi.addRoutes({
      path: '/portal/{proxy+}',
      methods: [apigwv2.HttpMethod.ANY],
      integration,
      authorizer: new apigwv2.HttpNoneAuthorizer(),
    });
    this.stage = this.httpApi.addStage('Stage', {
      stageName: API_STAGE_NAME,
      autoDeploy: true,
      throttle: {
        rateLimit: props.config.apiThrottlingRateLimit,
        burstLimit: props.config.apiThrottlingBurstLimit,
      },
      accessLogSettings: {
        destination: new apigwv2.LogGroupLogDestination(this.accessLogs),
        format: apigw.AccessLogFormat.custom(API_ACCESS_LOG_FORMAT),
      },
    });
    this.url = this.httpApi.apiEndpoint;
  }
}
